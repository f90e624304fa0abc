package rt

import (
	"fmt"
	"hash/fnv"
	"math"
	"sync"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// Random initialisation is a pure function of (seed, tensor name, global
// element index): every device computes exactly the elements of its own
// block, and every mesh and placement sees the same logical tensor.

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// uniform01 returns a float in (0, 1].
func uniform01(key, i uint64) float64 {
	return (float64(splitmix(key^splitmix(i))>>11) + 1) / (1 << 53)
}

func initKey(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return splitmix(seed ^ h.Sum64())
}

// InitValue is element i of a random initialiser.
func InitValue(init *ir.Init, key uint64, i int) float64 {
	switch init.Kind {
	case "zeros":
		return 0
	case "ones":
		return 1
	case "causal":
		// an attention mask: 0 where key j <= query i, -1e9 above
		t := int(init.A)
		if i%t > (i/t)%t {
			return -1e9
		}
		return 0
	case "uniform":
		return init.A + (init.B-init.A)*(uniform01(key, uint64(2*i))-1.0/(1<<53))
	case "normal":
		u1, u2 := uniform01(key, uint64(2*i)), uniform01(key, uint64(2*i+1))
		return init.A + init.B*math.Sqrt(-2*math.Log(u1))*math.Cos(2*math.Pi*u2)
	}
	panic("rt: unknown initialiser " + init.Kind)
}

// npyCache shares loaded files between the devices of a run.
type npyCache struct {
	mu    sync.Mutex
	files map[string]*Tensor
}

func (c *npyCache) load(path string) (*Tensor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.files[path]; ok {
		return t, nil
	}
	h, data, err := npy.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t := FromSlice(h.Shape, data)
	if c.files == nil {
		c.files = map[string]*Tensor{}
	}
	c.files[path] = t
	return t, nil
}

// blockView returns a tensor over the loaded file's own storage when
// block b of it is one contiguous run (every dim after some d whole, every
// dim before it one index: the whole file, or rows of a row split), else
// nil. Each step of a training run materialises its inputs again; a copy
// of a 256×512 f32 input was fresh memory, page faults and zeroing every
// step (issue 10). Sharing is safe because no kernel writes into an
// argument, except a donated one (plan.Instr.Donate), and the worker
// never donates a view (donor.owned); each rank makes its own header
// (and keeps it for later steps, Worker.loaded), so what a rank sets on
// it stays its own, and it is marked a view, so no pool or arena ever
// takes the file's storage back (hostPool.put).
func blockView(full *Tensor, b sbp.Block) *Tensor {
	r := len(b.Len)
	d := r // dims d.. are whole
	for d > 0 && b.Off[d-1] == 0 && b.Len[d-1] == full.Shape[d-1] {
		d--
	}
	for i := 0; i < d-1; i++ {
		if b.Len[i] != 1 {
			return nil
		}
	}
	start, st := 0, strides(full.Shape)
	for i := range r {
		start += b.Off[i] * st[i]
	}
	n := numel(b.Len)
	if n == 0 {
		return nil
	}
	v := header(full.DType, b.Len)
	v.Data, v.view = sliceData(full.Data, start, start+n), true
	return v
}

// materialise builds device dev's block of a source tensor.
func materialise(src *plan.Tensor, m *mesh.Mesh, dev int, seed uint64, cache *npyCache) (*Tensor, error) {
	pl := src.Placement
	b := sbp.Layout(m, src.Shape, pl, dev)
	if !holdsPartialValue(m, pl, b, dev) {
		return NewTensor(src.DType, b.Len), nil
	}
	init := src.Init
	if init.Kind == "load" {
		full, err := cache.load(init.Path)
		if err != nil {
			return nil, fmt.Errorf("load(%q): %v", init.Src, err)
		}
		if full.DType != src.DType || !sameShape(full.Shape, src.Shape) {
			return nil, fmt.Errorf("load(%q): file now holds %s, declared %s", init.Src, ir.Type{DType: full.DType, Shape: full.Shape}, ir.Type{DType: src.DType, Shape: src.Shape})
		}
		if v := blockView(full, b); v != nil {
			return v, nil
		}
		out := NewTensor(src.DType, b.Len)
		CopyBlock(out, make([]int, len(b.Len)), full, b.Off, b.Len)
		return out, nil
	}
	out := NewTensor(src.DType, b.Len)
	key := initKey(seed, src.Name)
	gst := strides(src.Shape)
	n := out.Numel()
	// values in float64 a chunk at a time: a whole block's worth (twice
	// an f32 block) on each of 256 ranks initialising at once was a
	// gigabyte the plan does not know of
	vals := make([]float64, min(n, initChunk))
	idx := make([]int, len(b.Len))
	for k0 := 0; k0 < n; k0 += len(vals) {
		chunk := vals[:min(len(vals), n-k0)]
		for k := range chunk {
			g := 0
			for d := range idx {
				g += (b.Off[d] + idx[d]) * gst[d]
			}
			chunk[k] = InitValue(init, key, g)
			for d := len(idx) - 1; d >= 0; d-- {
				idx[d]++
				if idx[d] < b.Len[d] {
					break
				}
				idx[d] = 0
			}
		}
		storeValues(&Tensor{DType: out.DType, Shape: []int{len(chunk)}, Data: sliceData(out.Data, k0, k0+len(chunk))}, chunk)
	}
	return out, nil
}

// initChunk is how many initialiser values materialise computes before
// storing them.
const initChunk = 4096

// storeValues writes initialiser values into a tensor of any dtype
// (integers take the floor).
func storeValues(out *Tensor, vals []float64) {
	switch d := out.Data.(type) {
	case []int32:
		for i, x := range vals {
			d[i] = int32(math.Floor(x))
		}
	case []int64:
		for i, x := range vals {
			d[i] = int64(math.Floor(x))
		}
	default:
		storeFloat64s(out, vals)
	}
}
