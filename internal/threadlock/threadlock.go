// Package threadlock says whether the calling goroutine is locked to its
// OS thread (runtime.LockOSThread), which the runtime knows but does not
// export.
//
// The local launcher needs it (rt/shift.go): a coroutine made by
// iter.Pull on a goroutine that is not locked may be resumed only by a
// goroutine that is not locked either — the runtime kills the process
// otherwise — so the launcher runs a shift of ranks on its caller's
// goroutine only when that goroutine is not locked. The answer comes from
// the runtime's own lockedOSThread, which the runtime lets other
// packages link to by name (runtime/linkname.go lists it); the empty
// assembly file beside this one lets a Go function be declared without
// a body.
package threadlock

import _ "unsafe" // go:linkname

// Locked says whether the calling goroutine is locked to its OS thread.
//
//go:linkname Locked runtime.lockedOSThread
func Locked() bool
