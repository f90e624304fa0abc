//go:build !(cgo && linux)

package cuda

import "unsafe"

// Without cgo Load fails before any of these is reached (see ErrNoCgo).

const errNoCgo = 999 // CUDA_ERROR_UNKNOWN

func errorName(int) string                                           { return "" }
func drInit(int) (int, uintptr, int, int, string, int)               { return 0, 0, 0, 0, "", errNoCgo }
func drPrimaryCtxRelease(int) int                                    { return errNoCgo }
func drTotalMem(int) (int64, int)                                    { return 0, errNoCgo }
func drDeviceCount() (int, int)                                      { return 0, errNoCgo }
func drStreamCreate(uintptr) (uintptr, int)                          { return 0, errNoCgo }
func drStreamSync(uintptr, uintptr) int                              { return errNoCgo }
func drStreamDestroy(uintptr, uintptr) int                           { return errNoCgo }
func drAlloc(uintptr, int64) (uint64, int)                           { return 0, errNoCgo }
func drFree(uintptr, uint64) int                                     { return errNoCgo }
func drMemset(uintptr, uint64, int64) int                            { return errNoCgo }
func drHtoD(uintptr, uint64, unsafe.Pointer, int64) int              { return errNoCgo }
func drDtoH(uintptr, unsafe.Pointer, uint64, int64) int              { return errNoCgo }
func drDtoD(uintptr, uint64, uint64, int64, uintptr) int             { return errNoCgo }
func drModuleLoad(uintptr, []byte) (uintptr, int)                    { return 0, errNoCgo }
func drModuleUnload(uintptr, uintptr) int                            { return errNoCgo }
func drGetFunction(uintptr, uintptr, string) (uintptr, int)          { return 0, errNoCgo }
func drLaunch(uintptr, uintptr, int, int, uintptr, *params) int      { return errNoCgo }
func nvErrorString(int) string                                       { return "" }
func nvCompile(string, string, []string, bool) ([]byte, string, int) { return nil, "", errNoCgo }
func nvSupportedArchs() ([]int, int)                                 { return nil, errNoCgo }
func blCreate(uintptr, uintptr) (uintptr, int)                       { return 0, errNoCgo }
func blDestroy(uintptr, uintptr) int                                 { return errNoCgo }
func blMathMode(uintptr, uintptr, int) int                           { return errNoCgo }
func blGemm(uintptr, uintptr, *gemmCall) int                         { return errNoCgo }

// events (cuda/events.go)

func drEventCreate(uintptr) (uintptr, int)             { return 0, errNoCgo }
func drEventDestroy(uintptr, uintptr) int              { return errNoCgo }
func drEventRecord(uintptr, uintptr, uintptr) int      { return errNoCgo }
func drEventSync(uintptr, uintptr) int                 { return errNoCgo }
func drEventChain(uintptr, []uintptr) ([]float32, int) { return nil, errNoCgo }
