//go:build !(cgo && linux)

package mpi

import "unsafe"

// Without cgo there is no dlopen: every entry point below is unreachable,
// because libOpen fails first and Load reports errNoCgo.

func libOpen(string) error                          { return errNoCgo }
func libSym(string) uintptr                         { return 0 }
func libSetABI(abiKind)                             {}
func libVersion() string                            { return "" }
func libInitialized() (bool, bool)                  { return false, false }
func libInitThread(int) (int, int)                  { return 0, -1 }
func libFinalize() int                              { return -1 }
func libErrorString(int) string                     { return "" }
func libCommRank(uintptr) (int, int)                { return 0, -1 }
func libCommSize(uintptr) (int, int)                { return 0, -1 }
func libCommSplit(uintptr, int, int) (uintptr, int) { return 0, -1 }
func libCommFree(uintptr) int                       { return -1 }
func libSetErrhandler(uintptr, uintptr) int         { return -1 }
func libAbort(uintptr, int) int                     { return -1 }
func libIsend(unsafe.Pointer, int, uintptr, int, int, uintptr) (uintptr, int) {
	return 0, -1
}
func libIrecv(unsafe.Pointer, int, uintptr, int, int, uintptr) (uintptr, int) {
	return 0, -1
}
func libIallreduce(unsafe.Pointer, unsafe.Pointer, int, uintptr, uintptr, uintptr) (uintptr, int) {
	return 0, -1
}
func libIreduce(unsafe.Pointer, unsafe.Pointer, int, uintptr, uintptr, int, uintptr) (uintptr, int) {
	return 0, -1
}
func libIallgatherv(unsafe.Pointer, int, unsafe.Pointer, *int32, *int32, uintptr, uintptr) (uintptr, int) {
	return 0, -1
}
func libIreduceScatter(unsafe.Pointer, unsafe.Pointer, *int32, uintptr, uintptr, uintptr) (uintptr, int) {
	return 0, -1
}
func libIalltoallv(unsafe.Pointer, *int32, *int32, unsafe.Pointer, *int32, *int32, uintptr, uintptr) (uintptr, int) {
	return 0, -1
}
func libIbcast(unsafe.Pointer, int, uintptr, int, uintptr) (uintptr, int) { return 0, -1 }
func libIbarrier(uintptr) (uintptr, int)                                  { return 0, -1 }
func libTest(*uintptr, uintptr) (bool, Status, int)                       { return false, Status{}, -1 }
func libCancel(*uintptr) int                                              { return -1 }
