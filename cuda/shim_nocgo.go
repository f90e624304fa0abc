//go:build !(cgo && linux)

package cuda

// Without cgo there is no dlopen: Load reports that before trying any
// file, so the functions below are never reached.

const haveDlopen = false

func dlOpen(Lib, string) (string, bool, bool)             { return "", false, false }
func entryPoints() map[Lib][]string                       { return nil }
func driverVersion() (int, int)                           { return 0, -1 }
func nvrtcVersion() (int, int, int)                       { return 0, 0, -1 }
func cublasLtVersion() int                                { return 0 }
func ncclVersion() (int, int)                             { return 0, -1 }
func ncclGetUniqueID(*UniqueID) int                       { return -1 }
func ncclCommInitRank(int, *UniqueID, int) (uintptr, int) { return 0, -1 }
func ncclErrorString(int) string                          { return "" }
