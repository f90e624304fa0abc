package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/meshrun/meshrun/algo"
	"github.com/meshrun/meshrun/internal/atomicfile"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/mesh"
)

// meshrun gemm compares the parallel GEMM algorithms of package algo for
// one problem size and device count: per-device memory, bytes sent,
// messages and modelled time, forward and backward, each next to its
// formula, and which algorithm is fastest on the given links and why.

const (
	maxGemmDevices    = 1 << 16 // every rank's figures are computed
	maxGemmSVGDevices = 256     // beyond this a picture is unreadable
	maxGemmElements   = 1 << 40 // as for a program's tensors
)

type gemmConfig struct {
	g       algo.GEMM
	devices int
	dtype   string
	links   algo.Links
	linkArg string
}

func (e *env) gemm(args []string) int {
	fs := newFlags(e, "gemm", "gemm --m M --k K --n N --devices P [--dtype f32|f64|bf16|f16] [--alpha US] [--bandwidth GBPS] [--link AXIS=US:GBPS,...] [--padded] [--json] [--svg DIR]")
	m := fs.Int("m", 0, "rows of X and Y (Y[m,n] = X[m,k]·W[k,n])")
	k := fs.Int("k", 0, "columns of X, rows of W")
	n := fs.Int("n", 0, "columns of W and Y")
	devices := fs.Int("devices", 0, "devices; every layout of exactly this many is compared")
	dtype := fs.String("dtype", "f32", "element type: f32, f64, bf16 or f16")
	alpha := fs.Float64("alpha", mesh.DefaultLink.Alpha*1e6, "link latency in microseconds, every axis")
	bw := fs.Float64("bandwidth", 1/mesh.DefaultLink.Beta/1e9, "link bandwidth in GB/s, every axis")
	links := fs.String("link", "", "per-axis links, e.g. 'depth=25:12.5,row=5:100' (alpha us : GB/s); axes: "+strings.Join(algo.AxisNames, ", "))
	padded := fs.Bool("padded", false, "blocks that move padded to the largest of each split, as stdlib/par.mesh's padded functions run them (every device sends the same)")
	asJSON := fs.Bool("json", false, "print the comparison as one JSON document")
	svg := fs.String("svg", "", "write a picture of every layout (and of each SUMMA step) into DIR")
	pos, err := parse(fs, args)
	if err != nil {
		return flagExit(err)
	}
	ck := newChecks(e, fs)
	cfg := validateGemm(ck, pos, *m, *k, *n, *devices, *dtype, *alpha, *bw, *links, *svg)
	if !e.report(ck) {
		return ExitUsage
	}
	cfg.g.Padded = *padded
	rows := gemmRows(cfg)
	win, why := gemmWinner(rows)
	if *asJSON {
		if err := writeGemmJSON(e.stdout, cfg, rows, win, why); err != nil {
			fmt.Fprintln(e.stderr, "meshrun:", err)
			return ExitFailure
		}
	} else {
		printGemm(e.stdout, cfg, rows, why)
	}
	if *svg != "" {
		files, err := writeGemmSVGs(*svg, cfg)
		if err != nil {
			fmt.Fprintln(e.stderr, "meshrun:", err)
			return ExitFailure
		}
		if !*asJSON {
			fmt.Fprintf(e.stdout, "\nwrote %d pictures into %s: %s\n", len(files), *svg, strings.Join(files, " "))
		}
	}
	return ExitOK
}

// validateGemm checks every flag before any work.
func validateGemm(ck *checks, pos []string, m, k, n, devices int, dtype string, alpha, bw float64, links, svg string) gemmConfig {
	if len(pos) > 0 {
		ck.fail("takes no FILE, got %s", strings.Join(pos, " "))
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"m", m}, {"k", k}, {"n", n}} {
		switch {
		case !ck.set[d.name]:
			ck.fail("missing --%s, a size of Y[m,n] = X[m,k]·W[k,n]", d.name)
		case d.v < 1:
			ck.fail("--%s %d: want at least 1", d.name, d.v)
		}
	}
	for _, p := range []struct {
		name string
		a, b int
	}{{"m×k", m, k}, {"k×n", k, n}, {"m×n", m, n}} {
		if p.a > 0 && p.b > 0 && float64(p.a)*float64(p.b) > maxGemmElements {
			ck.fail("%s = %d×%d: more than 2^40 elements", p.name, p.a, p.b)
		}
	}
	switch {
	case !ck.set["devices"]:
		ck.fail("missing --devices P, the device count to compare layouts on")
	case devices < 1 || devices > maxGemmDevices:
		ck.fail("--devices %d: want 1 to %d", devices, maxGemmDevices)
	case svg != "" && devices > maxGemmSVGDevices:
		ck.fail("--svg with --devices %d: pictures are drawn for at most %d devices", devices, maxGemmSVGDevices)
	}
	cfg := gemmConfig{devices: devices, dtype: dtype, linkArg: links}
	elem := map[string]int{"f32": 4, "f64": 8, "bf16": 2, "f16": 2}[dtype]
	if elem == 0 {
		ck.fail("--dtype %q: want f32, f64, bf16 or f16", dtype)
	}
	cfg.g = algo.GEMM{M: m, K: k, N: n, Elem: elem}
	ck.number("alpha", alpha, 0, false)
	ck.number("bandwidth", bw, 0, true)
	def := mesh.Link{Alpha: alpha * 1e-6, Beta: 1 / (bw * 1e9), Gamma: mesh.DefaultLink.Gamma}
	cfg.links = algo.Links{"": def}
	if links != "" || ck.set["link"] {
		parseGemmLinks(ck, links, devices, cfg.links)
	}
	if svg != "" || ck.set["svg"] {
		ck.outDir("svg", svg)
	}
	return cfg
}

// parseGemmLinks reads --link into l: AXIS=ALPHA_US:GBPS, comma-separated,
// for axes some layout of this device count has.
func parseGemmLinks(ck *checks, spec string, devices int, l algo.Links) {
	used := map[string]bool{}
	if devices >= 1 && devices <= maxGemmDevices {
		for _, lay := range algo.Layouts(devices) {
			for _, a := range lay.Mesh().Axes {
				used[a.Name] = true
			}
		}
	}
	for _, part := range strings.Split(spec, ",") {
		name, val, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		var alpha, bw float64
		if _, err := fmt.Sscanf(val, "%g:%g", &alpha, &bw); !ok || err != nil || !(bw > 0) || !(alpha >= 0) || math.IsInf(alpha+bw, 0) {
			ck.fail("--link %q: want AXIS=ALPHA_US:GBPS, e.g. row=5:100", part)
			continue
		}
		switch {
		case !slices.Contains(algo.AxisNames, name):
			ck.fail("--link %q: unknown axis %q; the layouts' axes are %s", part, name, strings.Join(algo.AxisNames, ", "))
		case !used[name] && devices >= 1:
			ck.fail("--link %q: no layout of %d devices has an axis %s", part, devices, name)
		default:
			l[name] = mesh.Link{Alpha: alpha * 1e-6, Beta: 1 / (bw * 1e9), Gamma: mesh.DefaultLink.Gamma}
		}
	}
}

// gemmRow is one layout's figures for its busiest device.
type gemmRow struct {
	Layout    algo.Layout   `json:"-"`
	Algorithm string        `json:"algorithm"`
	Mesh      string        `json:"mesh"`
	Memory    int64         `json:"memory_bytes"`
	Workspace int64         `json:"workspace_bytes"`
	Sent      [2]int64      `json:"sent_bytes"` // forward, backward
	Msgs      [2]int        `json:"messages"`
	Time      [2]float64    `json:"time_s"`
	Latency   [2]float64    `json:"latency_s"`
	Uneven    bool          `json:"uneven"` // devices differ: the sizes do not divide
	Formulas  algo.Formulas `json:"formulas"`
	Comms     []algo.Comm   `json:"comms"` // of the device that sends the most
}

func (r *gemmRow) total() float64 { return r.Time[0] + r.Time[1] }

func gemmRows(cfg gemmConfig) []*gemmRow {
	var rows []*gemmRow
	for _, l := range algo.Layouts(cfg.devices) {
		r := &gemmRow{Layout: l, Algorithm: l.String(), Mesh: l.Mesh().String(), Formulas: algo.FormulasOf(l.Kind)}
		var most int64 = -1
		for i, c := range cfg.g.Costs(l, cfg.links) {
			if i > 0 && (c.Memory() != r.Memory || c.Sent(algo.Forward)+c.Sent(algo.Backward) != r.Sent[0]+r.Sent[1]) {
				r.Uneven = true
			}
			r.Memory = max(r.Memory, c.Memory())
			r.Workspace = max(r.Workspace, c.Workspace)
			for p, pass := range []algo.Pass{algo.Forward, algo.Backward} {
				r.Sent[p] = max(r.Sent[p], c.Sent(pass))
				r.Msgs[p] = max(r.Msgs[p], c.Msgs(pass))
				lat, tr := c.Time(pass)
				if lat+tr > r.Time[p] {
					r.Time[p], r.Latency[p] = lat+tr, lat
				}
			}
			if s := c.Sent(algo.Forward) + c.Sent(algo.Backward); s > most {
				most, r.Comms = s, c.Comms
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// gemmWinner picks the least modelled time (then the least memory) and
// says why it wins over the next best.
func gemmWinner(rows []*gemmRow) (*gemmRow, string) {
	order := slices.Clone(rows)
	slices.SortStableFunc(order, func(a, b *gemmRow) int {
		if a.total() != b.total() {
			if a.total() < b.total() {
				return -1
			}
			return 1
		}
		return int(a.Memory - b.Memory)
	})
	w := order[0]
	if len(order) == 1 || w.total() == 0 && order[1].total() == 0 {
		return w, fmt.Sprintf("%s: no layout sends anything on one device; it holds %s", w.Algorithm, lower.HumanBytes(float64(w.Memory)))
	}
	r := order[1]
	sent := func(x *gemmRow) string { return lower.HumanBytes(float64(x.Sent[0] + x.Sent[1])) }
	bound := "bandwidth-bound"
	if lat := w.Latency[0] + w.Latency[1]; lat > w.total()/2 {
		bound = "latency-bound"
	}
	why := fmt.Sprintf("%s is fastest on these links: %s forward+backward vs %s for %s, the next best. "+
		"It sends %s per device (%s) in %d messages (%d); latency is %.0f%% of its time (%s); it holds %s per device (%s).",
		w.Algorithm, secs(w.total()), secs(r.total()), r.Algorithm,
		sent(w), sent(r), w.Msgs[0]+w.Msgs[1], r.Msgs[0]+r.Msgs[1],
		100*(w.Latency[0]+w.Latency[1])/w.total(), bound,
		lower.HumanBytes(float64(w.Memory)), lower.HumanBytes(float64(r.Memory)))
	return w, why
}

// secs renders modelled seconds.
func secs(s float64) string {
	switch {
	case s == 0:
		return "0 s"
	case s < 1e-3:
		return fmt.Sprintf("%.1f µs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.2f ms", s*1e3)
	}
	return fmt.Sprintf("%.3g s", s)
}

func linkText(l mesh.Link) string {
	return fmt.Sprintf("alpha %.4g us, %.4g GB/s (reductions %.4g GB/s)", l.Alpha*1e6, 1/l.Beta/1e9, 1/l.Gamma/1e9)
}

func printGemm(w io.Writer, cfg gemmConfig, rows []*gemmRow, why string) {
	g := cfg.g
	fmt.Fprintf(w, "Y[m,n] = X[m,k]·W[k,n] with m=%d k=%d n=%d, %s (e = %d bytes), on %d devices\n", g.M, g.K, g.N, cfg.dtype, g.Elem, cfg.devices)
	fmt.Fprintf(w, "links: every axis %s", linkText(cfg.links[""]))
	for _, a := range algo.AxisNames {
		if l, ok := cfg.links[a]; ok {
			fmt.Fprintf(w, "; %s: %s", a, linkText(l))
		}
	}
	fmt.Fprint(w, "\n\n")
	t := [][]string{{"algorithm", "mesh", "memory", "= elements", "pass", "sent", "= elements", "msgs", "=", "time", "= α-β-γ model"}}
	uneven := false
	for _, r := range rows {
		name := r.Algorithm
		if r.Uneven {
			name, uneven = name+" *", true
		}
		for p, pass := range []string{"fwd", "bwd"} {
			row := []string{"", "", "", ""}
			if p == 0 {
				row = []string{name, r.Mesh, lower.HumanBytes(float64(r.Memory)), r.Formulas.Memory}
			}
			row = append(row, pass, lower.HumanBytes(float64(r.Sent[p])), r.Formulas.Sent[p],
				fmt.Sprint(r.Msgs[p]), r.Formulas.Msgs[p], secs(r.Time[p]), r.Formulas.Time[p])
			t = append(t, row)
		}
	}
	fmt.Fprint(w, lower.FormatTable(t))
	fmt.Fprintf(w, "\nper device: memory is X, W and Y as held (the busiest device); sent and messages are what it sends (rt's ring\n")
	fmt.Fprintf(w, "collectives, binomial-tree broadcasts, a reduce sending each partial once); time is the collectives one after another.\n")
	fmt.Fprintf(w, "Formulas count elements (× e bytes) for sizes the mesh divides; α per message, β per element sent, γ per element reduced.\n")
	if uneven {
		fmt.Fprintf(w, "* the sizes do not divide evenly: the figures are the busiest device's, exact; the formulas are for even sizes.\n")
	}
	if g.Padded {
		fmt.Fprintf(w, "--padded: every block that moves is the largest of its split, zero-filled (stdlib/par.mesh's padded functions).\n")
	}
	fmt.Fprintf(w, "\n%s\n", why)
}

func writeGemmJSON(w io.Writer, cfg gemmConfig, rows []*gemmRow, win *gemmRow, why string) error {
	type link struct {
		AlphaUs  float64 `json:"alpha_us"`
		GBPerSec float64 `json:"gb_per_s"`
	}
	links := map[string]link{}
	for a, l := range cfg.links {
		if a == "" {
			a = "default"
		}
		links[a] = link{l.Alpha * 1e6, 1 / l.Beta / 1e9}
	}
	doc := struct {
		M, K, N int
		DType   string          `json:"dtype"`
		Devices int             `json:"devices"`
		Links   map[string]link `json:"links"`
		Rows    []*gemmRow      `json:"layouts"`
		Fastest string          `json:"fastest"`
		Why     string          `json:"why"`
	}{cfg.g.M, cfg.g.K, cfg.g.N, cfg.dtype, cfg.devices, links, rows, win.Algorithm, why}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// gemmFileName is a layout's picture file: "2d-2x2", "2p5d-2x2x2", "3d-2x2x2", "1d-column-8".
func gemmFileName(l algo.Layout) string {
	switch l.Kind {
	case algo.OneDColumn:
		return fmt.Sprintf("1d-column-%d", l.Q)
	case algo.OneDRow:
		return fmt.Sprintf("1d-row-%d", l.Q)
	case algo.TwoD:
		return fmt.Sprintf("2d-%dx%d", l.Q, l.Q)
	case algo.TwoHalfD:
		return fmt.Sprintf("2p5d-%dx%dx%d", l.Q, l.Q, l.D)
	}
	return fmt.Sprintf("3d-%dx%dx%d", l.Q, l.Q, l.Q)
}

// writeGemmSVGs writes every layout's picture and each SUMMA step's.
func writeGemmSVGs(dir string, cfg gemmConfig) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	put := func(name string, b []byte) error {
		files = append(files, name)
		return atomicfile.Write(filepath.Join(dir, name), func(w io.Writer) error {
			_, err := w.Write(b)
			return err
		}, nil)
	}
	for _, l := range algo.Layouts(cfg.devices) {
		base := gemmFileName(l)
		if err := put(base+".svg", cfg.g.SVG(l)); err != nil {
			return nil, err
		}
		if l.Kind != algo.TwoD && l.Kind != algo.TwoHalfD || l.Q == 1 {
			continue
		}
		for t := range l.Q {
			b, err := cfg.g.StepSVG(l, t)
			if err != nil {
				return nil, err
			}
			if err := put(fmt.Sprintf("%s-step%d.svg", base, t), b); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}
