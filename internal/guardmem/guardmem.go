//go:build linux

package guardmem

import (
	"syscall"
	"unsafe"
)

// Side says which end of a slice touches an inaccessible page.
type Side bool

const (
	AtEnd   Side = true
	AtStart Side = false
)

// Float32s returns n float32s flush against an inaccessible page on side,
// and the function that unmaps them.
func Float32s(n int, side Side) ([]float32, func(), error) {
	p, free, err := mapFlush(n*4, side)
	if err != nil || n == 0 {
		return nil, free, err
	}
	return unsafe.Slice((*float32)(p), n), free, nil
}

// Float64s is Float32s for float64s.
func Float64s(n int, side Side) ([]float64, func(), error) {
	p, free, err := mapFlush(n*8, side)
	if err != nil || n == 0 {
		return nil, free, err
	}
	return unsafe.Slice((*float64)(p), n), free, nil
}

// mapFlush maps bytes between two inaccessible pages, flush against the
// one on side.
func mapFlush(bytes int, side Side) (unsafe.Pointer, func(), error) {
	page := syscall.Getpagesize()
	size := max((bytes+page-1)/page*page, page)
	mem, err := syscall.Mmap(-1, 0, size+2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, func() {}, err
	}
	free := func() { syscall.Munmap(mem) }
	if err := syscall.Mprotect(mem[:page], syscall.PROT_NONE); err != nil {
		free()
		return nil, func() {}, err
	}
	if err := syscall.Mprotect(mem[page+size:], syscall.PROT_NONE); err != nil {
		free()
		return nil, func() {}, err
	}
	off := page
	if side == AtEnd {
		off = page + size - bytes
	}
	return unsafe.Pointer(&mem[off]), free, nil
}
