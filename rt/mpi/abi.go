package mpi

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
)

// errNoCgo is what Load reports in a build without cgo.
var errNoCgo = errors.New("mpi: MPI support needs cgo (build with CGO_ENABLED=1 on linux)")

// abiKind says how the loaded library spells its handles.
type abiKind int

const (
	abiOpenMPI abiKind = iota + 1 // handles are addresses of exported globals
	abiMPICH                      // handles are 32-bit integer constants (also Intel MPI, MVAPICH)
)

func (k abiKind) String() string {
	switch k {
	case abiOpenMPI:
		return "Open MPI"
	case abiMPICH:
		return "MPICH"
	}
	return "unknown"
}

// The element types the package moves. The index is the datatype's slot in
// handles.types.
const (
	dtFloat32 = iota
	dtFloat64
	dtInt32
	dtInt64
	dtUint16
	dtByte
	numTypes
)

// handles are the predefined objects of one ABI, widened to uintptr, and the
// integer constants that differ between the two.
type handles struct {
	world, commNull, requestNull, errorsReturn uintptr
	types                                      [numTypes]uintptr
	sum, max                                   uintptr
	anySource, anyTag, procNull                int
}

// MPICH's values, read from MPICH 4.0.2's mpi.h (Debian libmpich-dev). They
// are part of MPICH's ABI, shared by Intel MPI and MVAPICH, and have not
// changed since MPICH 3.
var mpichHandles = handles{
	world:        0x44000000, // MPI_COMM_WORLD
	commNull:     0x04000000, // MPI_COMM_NULL
	requestNull:  0x2c000000, // MPI_REQUEST_NULL
	errorsReturn: 0x54000001, // MPI_ERRORS_RETURN
	types: [numTypes]uintptr{
		dtFloat32: 0x4c00040a, // MPI_FLOAT
		dtFloat64: 0x4c00080b, // MPI_DOUBLE
		dtInt32:   0x4c000405, // MPI_INT
		dtInt64:   0x4c00083a, // MPI_INT64_T
		dtUint16:  0x4c000204, // MPI_UNSIGNED_SHORT
		dtByte:    0x4c00010d, // MPI_BYTE
	},
	sum:       0x58000003, // MPI_SUM
	max:       0x58000001, // MPI_MAX
	anySource: -2,
	anyTag:    -1,
	procNull:  -1,
}

// Open MPI's handles are the addresses of these exported objects (its mpi.h
// defines MPI_COMM_WORLD as &ompi_mpi_comm_world and so on). Where a second
// name is given it is used when the first is missing.
var openMPISymbols = []struct {
	slot  func(*handles) *uintptr
	names []string
}{
	{func(h *handles) *uintptr { return &h.world }, []string{"ompi_mpi_comm_world"}},
	{func(h *handles) *uintptr { return &h.commNull }, []string{"ompi_mpi_comm_null"}},
	{func(h *handles) *uintptr { return &h.requestNull }, []string{"ompi_request_null"}},
	{func(h *handles) *uintptr { return &h.errorsReturn }, []string{"ompi_mpi_errors_return"}},
	{func(h *handles) *uintptr { return &h.types[dtFloat32] }, []string{"ompi_mpi_float"}},
	{func(h *handles) *uintptr { return &h.types[dtFloat64] }, []string{"ompi_mpi_double"}},
	{func(h *handles) *uintptr { return &h.types[dtInt32] }, []string{"ompi_mpi_int"}},
	// long is 64 bits on every LP64 target Open MPI supports.
	{func(h *handles) *uintptr { return &h.types[dtInt64] }, []string{"ompi_mpi_int64_t", "ompi_mpi_long"}},
	{func(h *handles) *uintptr { return &h.types[dtUint16] }, []string{"ompi_mpi_unsigned_short"}},
	{func(h *handles) *uintptr { return &h.types[dtByte] }, []string{"ompi_mpi_byte"}},
	{func(h *handles) *uintptr { return &h.sum }, []string{"ompi_mpi_op_sum"}},
	{func(h *handles) *uintptr { return &h.max }, []string{"ompi_mpi_op_max"}},
}

// openMPIHandles resolves the table above with sym (dlsym on the library).
func openMPIHandles(sym func(string) uintptr) (handles, error) {
	h := handles{anySource: -1, anyTag: -1, procNull: -2}
	for _, s := range openMPISymbols {
		for _, n := range s.names {
			if *s.slot(&h) = sym(n); *s.slot(&h) != 0 {
				break
			}
		}
		if *s.slot(&h) == 0 {
			return h, fmt.Errorf("Open MPI library lacks %s", strings.Join(s.names, " and "))
		}
	}
	return h, nil
}

// detectABI tells the libraries apart: only Open MPI exports
// ompi_mpi_comm_world; the MPICH family names itself in its version string.
func detectABI(sym func(string) uintptr, version string) (abiKind, error) {
	if sym("ompi_mpi_comm_world") != 0 {
		return abiOpenMPI, nil
	}
	for _, s := range []string{"MPICH", "Intel(R) MPI", "MVAPICH"} {
		if strings.Contains(version, s) {
			return abiMPICH, nil
		}
	}
	first, _, _ := strings.Cut(version, "\n")
	return 0, fmt.Errorf("unknown MPI ABI (neither Open MPI nor MPICH): %q", first)
}

// multiarch is Debian's library directory name for this architecture.
func multiarch() string {
	switch runtime.GOARCH {
	case "arm64":
		return "aarch64-linux-gnu"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

// candidates lists the libraries to try, in order. MESHRUN_MPI_LIB alone
// when set; otherwise the library matching the launcher that started us
// (its runtime environment only works with its own library) comes first.
func candidates(getenv func(string) string, environ []string) []string {
	if p := getenv("MESHRUN_MPI_LIB"); p != "" {
		return []string{p}
	}
	dir := "/usr/lib/" + multiarch()
	openmpi := []string{"libmpi.so.40", dir + "/libmpi.so.40", dir + "/openmpi/lib/libmpi.so.40"}
	mpich := []string{"libmpich.so.12", dir + "/libmpich.so.12", dir + "/mpich/lib/libmpich.so.12"}
	hydra := getenv("PMI_RANK") != "" || getenv("PMI_SIZE") != ""
	for _, kv := range environ {
		hydra = hydra || strings.HasPrefix(kv, "HYDRA_")
	}
	if hydra && getenv("OMPI_COMM_WORLD_SIZE") == "" {
		return append(mpich, openmpi...)
	}
	return append(openmpi, mpich...)
}

var (
	loadOnce sync.Once
	loadErr  error
	lib      struct {
		path, version string
		abi           abiKind
		h             handles
	}
)

// Load opens the MPI library (once; later calls return the first result).
// Init calls it; call it directly to learn whether MPI is available.
func Load() error {
	loadOnce.Do(func() { loadErr = load() })
	return loadErr
}

func load() error {
	// Ask Open MPI and UCX not to catch fatal signals at all (the shim also
	// restores the Go runtime's handlers after loading and MPI_Init, for
	// libraries that ignore these). A setting made by the user wins.
	for _, kv := range [][2]string{{"OMPI_MCA_opal_signal", ""}, {"UCX_ERROR_SIGNALS", ""}} {
		if _, set := os.LookupEnv(kv[0]); !set {
			os.Setenv(kv[0], kv[1])
		}
	}
	var tried []string
	for _, path := range candidates(os.Getenv, os.Environ()) {
		err := libOpen(path)
		if errors.Is(err, errNoCgo) {
			return err
		}
		if err != nil {
			// dlerror repeats the name; "not found" is the usual case.
			msg := strings.TrimPrefix(err.Error(), path+": ")
			if strings.Contains(msg, "No such file or directory") {
				msg = "not found"
			}
			tried = append(tried, fmt.Sprintf("%s (%s)", path, msg))
			continue
		}
		lib.path, lib.version = path, libVersion()
		abi, err := detectABI(libSym, lib.version)
		if err != nil {
			return fmt.Errorf("mpi: %s: %v", path, err)
		}
		h := mpichHandles
		if abi == abiOpenMPI {
			if h, err = openMPIHandles(libSym); err != nil {
				return fmt.Errorf("mpi: %s: %v", path, err)
			}
		}
		libSetABI(abi)
		lib.abi, lib.h = abi, h
		return nil
	}
	if os.Getenv("MESHRUN_MPI_LIB") != "" {
		return fmt.Errorf("mpi: MESHRUN_MPI_LIB names no loadable MPI library: %s", strings.Join(tried, "; "))
	}
	return fmt.Errorf("mpi: no MPI library found; tried %s; install openmpi-bin or mpich, or set MESHRUN_MPI_LIB",
		strings.Join(tried, "; "))
}

// Library reports the loaded library's path, ABI family and version line.
func Library() (path, abi, version string) {
	if Load() != nil {
		return "", "", ""
	}
	first, _, _ := strings.Cut(lib.version, "\n")
	return lib.path, lib.abi.String(), strings.TrimSpace(first)
}
