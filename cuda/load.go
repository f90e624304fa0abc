package cuda

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// ErrNoCgo is Load's answer in a build without cgo, which has no dlopen.
var ErrNoCgo = errors.New("cuda: this meshrun was built without cgo; loading CUDA libraries needs it")

var (
	loadMu sync.Mutex
	loaded [numLibs]struct {
		done bool
		path string
		err  error
	}
)

// Load opens l (once; later calls return the first result) and, for
// cuBLAS, cuBLASLt before it.
func Load(l Lib) error {
	if l == Cublas {
		if err := Load(CublasLt); err != nil {
			return fmt.Errorf("cuda: cuBLAS needs cuBLASLt: %w", err)
		}
	}
	loadMu.Lock()
	defer loadMu.Unlock()
	st := &loaded[l]
	if !st.done {
		st.path, st.err = load(l, systemSearcher())
		st.done = true
	}
	return st.err
}

// Path is the file l was loaded from ("" when it is not loaded).
func Path(l Lib) string {
	loadMu.Lock()
	defer loadMu.Unlock()
	if loaded[l].err != nil {
		return ""
	}
	return loaded[l].path
}

// load tries every candidate in order and returns the first that opens
// and has every entry point; otherwise one line naming each file tried.
func load(l Lib, s searcher) (string, error) {
	if !haveDlopen {
		return "", ErrNoCgo
	}
	var tried []string
	for _, path := range s.candidates(l) {
		msg, missing, ok := dlOpen(l, path)
		if ok {
			return path, nil
		}
		if missing {
			msg = "loads, but has no " + msg
		} else {
			msg = shortDlerror(path, msg)
		}
		tried = append(tried, fmt.Sprintf("%s (%s)", path, msg))
	}
	how := fmt.Sprintf("install it or set %s to its file or folder", l.Env())
	if s.getenv(l.Env()) != "" {
		how = fmt.Sprintf("%s is set, so nothing else was tried", l.Env())
	}
	return "", fmt.Errorf("cuda: cannot load %s: tried %s; %s", l, strings.Join(tried, ", "), how)
}

// shortDlerror trims dlerror's message: it repeats the path, and "No such
// file or directory" is the usual case.
func shortDlerror(path, msg string) string {
	msg = strings.TrimPrefix(msg, path+": ")
	if strings.Contains(msg, "No such file or directory") {
		return "not found"
	}
	return strings.ReplaceAll(msg, "\n", " ")
}

// UniqueID is NCCL's ncclUniqueId: 128 opaque bytes made by one rank
// (GetUniqueID) and shared with the others before CommInitRank.
type UniqueID [128]byte

// DriverVersion is cuDriverGetVersion's answer (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := Load(Driver); err != nil {
		return 0, err
	}
	v, rc := driverVersion()
	if rc != 0 {
		return 0, fmt.Errorf("cuda: cuDriverGetVersion failed with CUresult %d", rc)
	}
	return v, nil
}

// NVRTCVersion is nvrtcVersion's answer.
func NVRTCVersion() (major, minor int, err error) {
	if err := Load(NVRTC); err != nil {
		return 0, 0, err
	}
	a, b, rc := nvrtcVersion()
	if rc != 0 {
		return 0, 0, fmt.Errorf("cuda: nvrtcVersion failed with nvrtcResult %d", rc)
	}
	return a, b, nil
}

// CublasLtVersion is cublasLtGetVersion's answer (e.g. 130000).
func CublasLtVersion() (int, error) {
	if err := Load(CublasLt); err != nil {
		return 0, err
	}
	return cublasLtVersion(), nil
}

// NCCLVersion is ncclGetVersion's answer (e.g. 22703 for 2.27.3).
func NCCLVersion() (int, error) {
	if err := Load(NCCL); err != nil {
		return 0, err
	}
	v, rc := ncclVersion()
	if rc != 0 {
		return 0, ncclError("ncclGetVersion", rc)
	}
	return v, nil
}

// NCCLGetUniqueID makes a new unique id (on one rank; the others receive
// it over MPI or the rendezvous).
func NCCLGetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := Load(NCCL); err != nil {
		return id, err
	}
	if rc := ncclGetUniqueID(&id); rc != 0 {
		return id, ncclError("ncclGetUniqueId", rc)
	}
	return id, nil
}

// NCCLCommInitRank joins rank of nranks to the communicator named by id
// and returns its opaque handle. It needs a current CUDA context on a GPU;
// nothing in meshrun calls it yet.
func NCCLCommInitRank(nranks int, id *UniqueID, rank int) (uintptr, error) {
	if err := Load(NCCL); err != nil {
		return 0, err
	}
	comm, rc := ncclCommInitRank(nranks, id, rank)
	if rc != 0 {
		return 0, ncclError("ncclCommInitRank", rc)
	}
	return comm, nil
}

func ncclError(op string, rc int) error {
	return fmt.Errorf("cuda: %s: %s (ncclResult %d)", op, ncclErrorString(rc), rc)
}
