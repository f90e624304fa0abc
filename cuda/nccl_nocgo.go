//go:build !(cgo && linux)

package cuda

// Without cgo Load fails before any of these is reached (see ErrNoCgo).

func ncInit(uintptr, int, *UniqueID, int) (uintptr, int) { return 0, errNoCgo }
func ncDestroy(uintptr, uintptr) int                     { return errNoCgo }
func ncAbort(uintptr, uintptr) int                       { return errNoCgo }
func ncAsyncError(uintptr) (int, int)                    { return 0, errNoCgo }
func ncStreamQuery(uintptr, uintptr) int                 { return errNoCgo }
func ncOps(uintptr, uintptr, uintptr, []ncOp) int        { return errNoCgo }
