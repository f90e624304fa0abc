// (empty: lets threadlock.go declare Locked without a body)
