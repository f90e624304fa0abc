package cuda

// UseDriver is useDriver for the external tests (examples_test.go).
var UseDriver = useDriver
