package cuda

// UseDriver is useDriver for the external tests (examples_test.go).
var UseDriver = useDriver

// FakeOnly is fakeOnly for the external tests.
var FakeOnly = fakeOnly
