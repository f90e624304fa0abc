package cuda

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Device is one GPU as the backend uses it: its primary context, one
// stream every kernel, cuBLAS call and device-to-device copy runs on, the
// compiled kernels and a caching allocator. The host copies (cuMemcpyHtoD,
// cuMemcpyDtoH, cuMemsetD8) are the driver's synchronous ones on the
// legacy default stream, which waits for the device's stream and is
// waited for by it: so every operation happens in the order it was
// issued, and a freed buffer can be handed out again at once (whatever
// still reads it was issued before whatever writes it next).
type Device struct {
	Ordinal int
	Name    string
	Arch    string // sm_XY, what NVRTC compiles for
	Code    string // what the kernels are: "sm_90 CUBIN", or PTX the driver JIT-compiled
	dev     int    // the driver's CUdevice, which holds the primary context
	ctx     uintptr
	stream  uintptr

	mu      sync.Mutex
	free    map[int64][]uint64 // released allocations, by size
	live    int64              // bytes allocated from the driver
	kernels *module

	blasMu sync.Mutex // a cuBLAS handle is used by one thread at a time
	blas   uintptr
	tf32   atomic.Bool // f32 GEMMs on the tensor cores in TF32 (Backend.SetTF32)

	events eventBook // the stopwatches' events (events.go)
}

// Error is a failed call into a CUDA library: which call, what it was
// doing, and the library's name for the status.
type Error struct {
	Call string // e.g. cuMemAlloc
	What string // e.g. "4 MiB"; may be empty
	Code int
	Name string // e.g. CUDA_ERROR_OUT_OF_MEMORY
}

func (e *Error) Error() string {
	call := e.Call
	if e.What != "" {
		call += " (" + e.What + ")"
	}
	return fmt.Sprintf("cuda: %s: %s (%d)", call, e.Name, e.Code)
}

// check turns a driver status into an error named by cuGetErrorName.
func check(call, what string, rc int) error {
	if rc == 0 {
		return nil
	}
	name := errorName(rc)
	if name == "" {
		name = "unknown CUresult"
	}
	return &Error{Call: call, What: what, Code: rc, Name: name}
}

// Open loads the driver, NVRTC and cuBLAS, makes the device's primary
// context current, creates its stream and cuBLAS handle, and compiles
// (or finds in the cache) the kernels for its architecture. When a step
// fails, what the earlier ones made is given back before the error
// returns: a caller that tries another device, or the CPU, holds nothing
// of this one.
func Open(ordinal int) (*Device, error) {
	for _, l := range []Lib{Driver, NVRTC, Cublas} {
		if err := Load(l); err != nil {
			return nil, err
		}
	}
	dev, ctx, major, minor, name, rc := drInit(ordinal)
	if err := check("cuInit/cuDeviceGet/cuDevicePrimaryCtxRetain", fmt.Sprintf("device %d", ordinal), rc); err != nil {
		return nil, err
	}
	d := &Device{Ordinal: ordinal, Name: name, Arch: fmt.Sprintf("sm_%d%d", major, minor), dev: dev, ctx: ctx, free: map[int64][]uint64{}}
	if err := d.setUp(); err != nil {
		d.tearDown()
		return nil, err
	}
	return d, nil
}

// setUp creates the stream and cuBLAS handle and loads the kernels; on an
// error, whatever it made is in d for tearDown.
func (d *Device) setUp() error {
	var rc int
	if d.stream, rc = drStreamCreate(d.ctx); rc != 0 {
		d.stream = 0
		return check("cuStreamCreate", "", rc)
	}
	if d.blas, rc = blCreate(d.ctx, d.stream); rc != 0 {
		d.blas = 0
		return blasError("cublasCreate", rc)
	}
	if err := blasError("cublasSetMathMode", blMathMode(d.ctx, d.blas, mathDefault)); err != nil {
		return err
	}
	var err error
	d.kernels, err = d.loadModule(KernelSource())
	return err
}

// TotalMemory is the device's memory in bytes (cuDeviceTotalMem), read
// without making a context.
func TotalMemory(ordinal int) (int64, error) {
	if err := Load(Driver); err != nil {
		return 0, err
	}
	n, rc := drTotalMem(ordinal)
	return n, check("cuDeviceTotalMem", fmt.Sprintf("device %d", ordinal), rc)
}

// DeviceCount is cuDeviceGetCount's answer (after loading the driver).
func DeviceCount() (int, error) {
	if err := Load(Driver); err != nil {
		return 0, err
	}
	n, rc := drDeviceCount()
	return n, check("cuDeviceGetCount", "", rc)
}

// Close waits for the stream, returns the cached blocks to the driver,
// destroys the kernels' module, the cuBLAS handle and the stream, and
// releases the primary context (the driver destroys it when its last
// holder lets go, and with it every buffer still live; otherwise those
// stay allocated until the process ends). A second Close does nothing.
func (d *Device) Close() error {
	if d.ctx == 0 {
		return nil
	}
	err := d.Sync()
	if e := d.destroyEvents(); err == nil {
		err = e
	}
	d.mu.Lock()
	for _, ps := range d.free {
		for _, p := range ps {
			drFree(d.ctx, p)
		}
	}
	d.free = map[int64][]uint64{}
	d.mu.Unlock()
	if e := d.tearDown(); err == nil {
		err = e
	}
	return err
}

// tearDown gives back, in the reverse order of Open, what Open made and
// d still holds, and forgets it; the first failure is the error.
func (d *Device) tearDown() error {
	var errs []error
	if d.kernels != nil {
		errs = append(errs, check("cuModuleUnload", "", drModuleUnload(d.ctx, d.kernels.handle)))
		d.kernels = nil
	}
	if d.blas != 0 {
		errs = append(errs, blasError("cublasDestroy", blDestroy(d.ctx, d.blas)))
		d.blas = 0
	}
	if d.stream != 0 {
		errs = append(errs, check("cuStreamDestroy", "", drStreamDestroy(d.ctx, d.stream)))
		d.stream = 0
	}
	errs = append(errs, check("cuDevicePrimaryCtxRelease", fmt.Sprintf("device %d", d.Ordinal), drPrimaryCtxRelease(d.dev)))
	d.ctx = 0
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Sync waits for everything issued on the device's stream.
func (d *Device) Sync() error { return check("cuStreamSynchronize", "", drStreamSync(d.ctx, d.stream)) }

// alloc returns n bytes of device memory, reusing a released block of the
// same size when there is one. n = 0 is the null pointer.
func (d *Device) alloc(n int64) (uint64, error) {
	if n == 0 {
		return 0, nil
	}
	d.mu.Lock()
	if ps := d.free[n]; len(ps) > 0 {
		p := ps[len(ps)-1]
		d.free[n] = ps[:len(ps)-1]
		d.mu.Unlock()
		return p, nil
	}
	d.mu.Unlock()
	p, rc := drAlloc(d.ctx, n)
	if rc != 0 && d.trim() {
		p, rc = drAlloc(d.ctx, n) // the cache held the memory: try again
	}
	if rc != 0 {
		return 0, check("cuMemAlloc", nbytes(n), rc)
	}
	d.mu.Lock()
	d.live += n
	d.mu.Unlock()
	return p, nil
}

// release puts a block back for reuse (see Device for why no wait).
func (d *Device) release(p uint64, n int64) {
	if n == 0 {
		return
	}
	d.mu.Lock()
	d.free[n] = append(d.free[n], p)
	d.mu.Unlock()
}

// trim returns every cached block to the driver; it reports whether there
// was any.
func (d *Device) trim() bool {
	if d.Sync() != nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	freed := false
	for n, ps := range d.free {
		for _, p := range ps {
			drFree(d.ctx, p)
			d.live -= n
			freed = true
		}
	}
	d.free = map[int64][]uint64{}
	return freed
}

func (d *Device) zero(p uint64, n int64) error {
	if n == 0 {
		return nil
	}
	return check("cuMemsetD8", nbytes(n), drMemset(d.ctx, p, n))
}

func (d *Device) toDevice(dst uint64, src unsafe.Pointer, n int64) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyHtoD", nbytes(n), drHtoD(d.ctx, dst, src, n))
}

func (d *Device) toHost(dst unsafe.Pointer, src uint64, n int64) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoH", nbytes(n), drDtoH(d.ctx, dst, src, n))
}

func (d *Device) copyOnDevice(dst, src uint64, n int64) error {
	if n == 0 {
		return nil
	}
	return check("cuMemcpyDtoDAsync", nbytes(n), drDtoD(d.ctx, dst, src, n, d.stream))
}

// params packs a kernel's arguments as the driver reads them: each at an
// offset aligned to 8 bytes (every argument of our kernels is a pointer,
// a long long, a float/double or a struct of long longs).
type params struct {
	buf  []byte
	offs []int
}

func (p *params) ptr(v uint64) *params { return p.u64(v) }
func (p *params) i64(v int64) *params  { return p.u64(uint64(v)) }
func (p *params) u64(v uint64) *params {
	p.offs = append(p.offs, len(p.buf))
	p.buf = binary.LittleEndian.AppendUint64(p.buf, v)
	return p
}

// bcast appends a Broadcast by value (int64 fields: no padding).
func (p *params) bcast(b *Broadcast) *params {
	p.offs = append(p.offs, len(p.buf))
	p.buf = binary.LittleEndian.AppendUint64(p.buf, uint64(b.NDim))
	for _, arr := range [][MaxDims]int64{b.Shape, b.A, b.B} {
		for _, v := range arr {
			p.buf = binary.LittleEndian.AppendUint64(p.buf, uint64(v))
		}
	}
	return p
}

// launch runs kernel name over n elements (LaunchDims) on the stream.
func (d *Device) launch(name string, n int64, p *params) error {
	fn, err := d.kernels.function(d, name)
	if err != nil {
		return err
	}
	grid, block := LaunchDims(int(n))
	return check("cuLaunchKernel", name, drLaunch(d.ctx, fn, grid, block, d.stream, p))
}

func nbytes(n int64) string { return fmt.Sprintf("%d bytes", n) }
