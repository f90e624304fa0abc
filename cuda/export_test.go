package cuda

import (
	"time"

	"github.com/meshrun/meshrun/rt"
)

// UseDriver is useDriver for the external tests (examples_test.go).
var UseDriver = useDriver

// FakeOnly is fakeOnly for the external tests.
var FakeOnly = fakeOnly

// SpanEvents is a stopwatch's events of its last execution: the mark,
// then each span's two.
func SpanEvents(sw rt.Stopwatch) []uintptr {
	s := sw.(*stopwatch)
	return s.events[:s.n]
}

// DeviceGap is the device's time from event a to event b (negative when
// b passed first).
func DeviceGap(be *Backend, a, b uintptr) (time.Duration, error) {
	ms, rc := drEventChain(be.dev.ctx, []uintptr{a, b})
	if err := check("cuEventElapsedTime", "", rc); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms[0]) * 1e6), nil
}

// StartTestRanks is startTestRanks for the external tests.
var StartTestRanks = startTestRanks

// UseNCCL is useNCCL for the external tests.
var UseNCCL = useNCCL

// OnGPU is onGPU for the external tests.
var OnGPU = onGPU

// Launched says whether the backend's device looked kernel name up, which
// it does at the kernel's first launch.
func Launched(be *Backend, name string) bool {
	m := be.dev.kernels
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.fns[name]
	return ok
}
