// Package mpi is a self-contained MPI binding for running meshrun's per-rank
// programs as separate processes, loaded at run time: nothing of MPI is
// needed to build, and a program that never calls Init never touches it.
//
// # Loading
//
// A small C shim (shim_cgo.go) opens the library with dlopen, RTLD_NOW |
// RTLD_GLOBAL (Open MPI's plugins resolve symbols against libmpi). The path
// is MESHRUN_MPI_LIB when set; otherwise the library of the launcher that
// started us comes first (OMPI_COMM_WORLD_SIZE: Open MPI's libmpi.so.40;
// PMI_RANK, PMI_SIZE or HYDRA_*: MPICH's libmpich.so.12), then the other.
// A build without cgo compiles, and Init reports that MPI support needs cgo.
//
// # Two ABIs
//
// MPI fixes the C API, not the ABI, and the shim is built without mpi.h.
// Open MPI's handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, ...) are addresses
// of exported globals, found with dlsym; MPICH's (shared by Intel MPI and
// MVAPICH) are 32-bit integer constants, copied from its mpi.h into abi.go.
// The library is identified by whether it exports ompi_mpi_comm_world, else
// by MPI_Get_library_version. Go holds every handle as a uintptr; the shim
// (shim_abi.h, compiled once per ABI) narrows it to void* or int at each
// call, and reads MPI_Status, MPI_IN_PLACE and the wildcard ranks in the
// loaded library's own layout and values.
//
// # Never hanging
//
// A peer that died or never posts its half would block a blocking MPI call
// for ever. So every communication starts the MPI-3 nonblocking variant
// (MPI_Isend, MPI_Iallreduce, ...) and polls MPI_Test, spinning briefly then
// sleeping with backoff, until it completes or the context ends; a context
// without a deadline gets DefaultTimeout. Calls with no nonblocking form
// (Init, Finalize, Split, Free) run on a goroutine the caller stops waiting
// for at the deadline. A timeout returns a *TimeoutError naming the
// operation; the request stays pending in MPI (its buffers stay pinned), and
// the caller is expected to Abort, which ends every rank through the
// launcher. Library errors come back as *Error (MPI_ERRORS_RETURN), not as
// an abort inside MPI.
//
// # Threads and memory
//
// Init asks for MPI_THREAD_MULTIPLE and accepts MPI_THREAD_SERIALIZED, in
// which case every MPI call is made under one lock (see Init). Buffers are
// Go slices handed to MPI for the life of a request, so they are pinned with
// runtime.Pinner from start to completion.
//
// # Tests
//
// go test ./rt/mpi runs unit tests anywhere, then, where the libraries and
// launchers are installed (Debian: openmpi-bin, mpich), starts the test
// binary as 2-4 ranks under mpirun.openmpi and mpiexec.mpich and as a
// singleton, and checks every collective against plain-Go references, plus
// Abort and timeouts. Without them those tests skip and say why.
// MESHRUN_MPI_BENCH=1 times Allreduce (TestBench).
package mpi
