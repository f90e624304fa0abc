package rt

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// ZeRO-Offload on a pipeline: each pipeline rank's host keeps its own
// stages' master weights and optimizer states and runs their update. The
// tests hold a pipelined run with offload to the same pipeline without
// offload (bit for bit) and to one device, and read each rank's copies
// and its two tiers' memory from what the runtime measured.

// offPipe is pipe3D (four residual layers on pp×dp×tp = 2×2×2, four
// micro-batches) with a ZeRO stage, a precision, clipping and an offload
// setting ("" for none).
func offPipe(sched string, zero int, prec, off string, clip bool) string {
	extra := fmt.Sprintf("    zero = %d\n", zero)
	if prec != "" {
		extra += "    precision = " + prec + "\n"
	}
	if clip {
		extra += "    clip = 0.5\n"
	}
	if off != "" {
		extra += "    offload = " + off + "\n"
	}
	return pipe3D(sched, extra, false)
}

var offPipeSchedules = []string{"gpipe", "1f1b", "interleaved(2)", "zb1p", "zbv"}

// requireSameTraining asserts two runs' losses and final parameters are
// equal bit for bit.
func requireSameTraining(t *testing.T, ref, res *TrainResult, name string) {
	t.Helper()
	require.Equal(t, ref.Losses, res.Losses, name)
	require.Equal(t, len(ref.Final), len(res.Final), name)
	for i := range ref.Final {
		require.Equal(t, ref.Final[i].Float64s(), res.Final[i].Float64s(), "%s: %s", name, res.Params[i].Name)
	}
}

// Offloading on a pipeline changes where each stage's update runs, not
// what it computes: under every schedule, ZeRO stage and precision (f16
// with its overflow flag, and clipping, whose pieces of the global norm
// meet on the last stage in host memory) the losses and final parameters
// equal the same pipeline's without offload, exactly.
func TestOffloadPipelineTrainsLikeWithout(t *testing.T) {
	schedules := offPipeSchedules
	if testing.Short() {
		schedules = []string{"1f1b", "zbv"} // 300 runs of 8 devices take 20 s
	}
	for _, sched := range schedules {
		for zero := range 4 {
			for _, prec := range []string{"", "bf16", "f16"} {
				for _, clip := range []bool{false, true} {
					if clip && prec != "f16" {
						continue // f32 clipping: TestOffloadPipelineTrainsLikeOneDevice
					}
					_, ref := trainPlan(t, offPipe(sched, zero, prec, "", clip), false)
					for _, off := range []string{"optimizer", "optimizer+params"} {
						name := fmt.Sprintf("%s zero=%d precision=%q clip=%v offload=%s", sched, zero, prec, clip, off)
						p, res := trainPlan(t, offPipe(sched, zero, prec, off, clip), false)
						require.True(t, p.Exec.HasHost(), name)
						require.NotNil(t, p.Pipe, name)
						require.Len(t, res.Losses, 3, name)
						requireSameTraining(t, ref, res, name)
					}
				}
			}
		}
	}
}

// ... and like one device: in f32 the pipelined, offloaded run's losses
// and parameters are the single-device run's (without offload) to f32
// rounding; with bf16, which rounds differently on one device, they equal
// the same micro-batches on the dp×tp mesh without the pipeline axis
// (offloaded there too) to 1e-6, as the pipeline tests hold them.
func TestOffloadPipelineTrainsLikeOneDevice(t *testing.T) {
	for _, sched := range offPipeSchedules {
		for _, off := range []string{"optimizer", "optimizer+params"} {
			for _, prec := range []string{"", "bf16"} {
				name := fmt.Sprintf("%s offload=%s precision=%q", sched, off, prec)
				_, res := trainPlan(t, offPipe(sched, 2, prec, off, true), false)
				var ref *TrainResult
				tol := 1e-5
				if prec == "" {
					_, ref = trainPlan(t, offPipe(sched, 2, prec, "", true), true)
				} else {
					_, ref = trainPlan(t, withoutPipeline(offPipe(sched, 2, prec, off, true)), false)
					tol = 1e-6
				}
				d := CompareTensors(FromSlice([]int{len(res.Losses)}, res.Losses), FromSlice([]int{len(ref.Losses)}, ref.Losses), tol, tol/10)
				require.True(t, d.OK, "%s: losses %v vs %v", name, res.Losses, ref.Losses)
				for i, prm := range ref.Params {
					d := CompareTensors(res.Param(prm.Name), ref.Final[i], tol, tol/10)
					require.True(t, d.OK, "%s: param %s off by %g", name, prm.Name, d.MaxAbs)
				}
			}
		}
	}
}

// copiedBy sums device st's copy events of one kind whose instruction
// names contain part, as the runtime measured them.
func copiedBy(st DeviceStats, kind, part string) int64 {
	var n int64
	for _, e := range st.Events {
		if e.Kind == kind && strings.Contains(e.Name, part) {
			n += e.Copied
		}
	}
	return n
}

// Per step each pipeline rank copies its own stages' gradients to its
// host and their updated parameters back: 2Ψ_stage bytes each way in
// bf16 (4Ψ_stage in f32), where Ψ_stage is the rank's block of its
// stages' parameters. By hand: a rank holds two layers, each an 8×16 and
// a 16×8 matrix split over tp=2, so Ψ_stage = 4·128/2 = 256 elements,
// 128 from ZeRO-1 on (storage split over dp=2). ZeRO-2/3 reduce each
// gradient the moment a micro-batch's backward completes it, so the
// gradients go to the host once per micro-batch (4×). With
// optimizer+params each micro-batch's backward fetches the parameters it
// reads again: every C, and every A but the first layer's (x needs no
// gradient), so the rank holding layer 0 fetches 3 of its 4 matrices
// again per micro-batch and the other rank all 4. Nothing else crosses
// between the tiers without clipping or f16. The plan's count (explain)
// equals the runtime's.
func TestOffloadPipelineCopiesPerStage(t *testing.T) {
	for _, sched := range []string{"1f1b", "zbv"} { // zbv: layers 0 and 3 on rank 0
		for zero := range 4 {
			for _, prec := range []string{"", "bf16"} {
				for _, off := range []string{"optimizer", "optimizer+params"} {
					name := fmt.Sprintf("%s zero=%d precision=%q offload=%s", sched, zero, prec, off)
					p, res := trainPlan(t, offPipe(sched, zero, prec, off, false), false)
					elem, psi, micro := int64(4), int64(256), int64(4)
					if prec != "" {
						elem = 2
					}
					if zero > 0 {
						psi /= 2
					}
					grads := elem * psi
					if zero >= 2 {
						grads *= micro
					}
					for d, st := range res.Last.Devices {
						pp := p.Exec.Mesh.Coord(d)[0]
						again := int64(0)
						if off == "optimizer+params" {
							again = elem * psi / 4 * micro * []int64{3, 4}[pp]
						}
						require.Equal(t, grads, copiedBy(st, "offload", ".grad.host"), "%s device %d: gradients to the host", name, d)
						require.Equal(t, elem*psi, copiedBy(st, "fetch", ".fetched to device"), "%s device %d: parameters to the device", name, d)
						require.Equal(t, again, copiedBy(st, "fetch", ".fetched.recomputed"), "%s device %d: fetched again", name, d)
						require.Equal(t, grads, st.ToHost, "%s device %d: nothing else to the host", name, d)
						require.Equal(t, elem*psi+again, st.ToDevice, "%s device %d: nothing else to the device", name, d)
						h, dv := lower.CopiedBytes(p.Exec, d)
						require.Equal(t, [2]int64{st.ToHost, st.ToDevice}, [2]int64{h, dv}, "%s: plan and runtime", name)
					}
				}
			}
		}
	}
}

// With f16 and clipping, the pieces of the overflow flag and of the
// global gradient norm are host values that meet on the last stage: each
// crosses the cut through device memory (fetched, sent, received,
// offloaded), four f32 scalars per step on each rank — rank 0 sends its
// two pieces and receives the two results, the last rank the reverse.
func TestOffloadPipelineStagesHostScalars(t *testing.T) {
	p, res := trainPlan(t, offPipe("1f1b", 1, "f16", "optimizer", true), false)
	grads, params := int64(2*128), int64(2*128)
	for d, st := range res.Last.Devices {
		require.Equal(t, grads+4*2, st.ToHost, "device %d", d)
		require.Equal(t, params+4*2, st.ToDevice, "device %d", d)
		h, dv := lower.CopiedBytes(p.Exec, d)
		require.Equal(t, [2]int64{st.ToHost, st.ToDevice}, [2]int64{h, dv}, "device %d: plan and runtime", d)
	}
}

// The two tiers' memory per stage: the runtime's measured device and
// host peaks equal the plan's on every rank; between steps a device holds
// nothing of the model's state and its host holds 12 bytes for each
// element of its stages' parameters (f32 master, Adam's two moments): 12
// Ψ_stage, halved over dp=2 from ZeRO-1 on; the device's peak falls
// below the same pipeline's without offload. explain's per-device rows
// report the same figures the runtime measured.
func TestOffloadPipelineMemoryTiers(t *testing.T) {
	for _, sched := range []string{"1f1b", "interleaved(2)"} {
		for _, zero := range []int{0, 2} {
			_, ref := trainPlan(t, offPipe(sched, zero, "bf16", "", false), false)
			for _, off := range []string{"optimizer", "optimizer+params"} {
				name := fmt.Sprintf("%s zero=%d offload=%s", sched, zero, off)
				p, res := trainPlan(t, offPipe(sched, zero, "bf16", off, false), false)
				state := int64(12 * 256)
				if zero > 0 {
					state /= 2
				}
				ex := lower.Explain(p)
				for d, st := range res.Last.Devices {
					require.Equal(t, p.Peak[d], st.Peak, "%s device %d: device peak", name, d)
					require.Equal(t, p.HostPeak[d], st.HostPeak, "%s device %d: host peak", name, d)
					require.Zero(t, st.Held, name)
					require.Equal(t, state, st.HostHeld, "%s device %d", name, d)
					require.Less(t, st.Peak, ref.Last.Devices[d].Peak, "%s device %d", name, d)
					m := ex.Memory[d]
					require.Equal(t, d, m.Device)
					require.NotNil(t, m.Host, name)
					require.Equal(t, [3]int64{0, 0, st.Peak}, [3]int64{m.ParamBytes, m.OptimizerBytes, m.PeakBytes}, "%s device %d: explain's device row", name, d)
					require.Equal(t, [4]int64{st.HostHeld, st.HostPeak, st.ToHost, st.ToDevice},
						[4]int64{m.Host.ParamBytes + m.Host.OptimizerBytes, m.Host.PeakBytes, m.Host.ToHostBytes, m.Host.ToDeviceBytes}, "%s device %d: explain's host row", name, d)
				}
			}
		}
	}
}

// A parameter both stages read lives on its own stage's host: the device
// copy its stage fetches is sent to the other stage every step, and the
// other stage's contribution to its gradient comes back before the
// offload. With ZeRO 0–3 and clipping it trains as without offload, bit
// for bit, and like one device.
func TestOffloadPipelineSharedParam(t *testing.T) {
	src := func(sched string, zero int, off string) string {
		s := fmt.Sprintf(`mesh M = [dp=2, pipeline pp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
input t : f32[8, 4] {S(0)} = normal(0, 1)
param W : f32[4, 4] = normal(0, 0.5)
train {
    pipeline = %s
    microbatches = 2
    h = tanh(x @ W)
    stage = 1
    h = tanh(h @ W)
    loss = mse(h, t)
    optimizer = adam(lr=0.05)
    zero = %d
    clip = 0.5
    steps = 3
`, sched, zero)
		if off != "" {
			s += "    offload = " + off + "\n"
		}
		return s + "}\n"
	}
	for _, sched := range []string{"gpipe", "1f1b", "zb1p"} {
		for zero := range 4 {
			_, ref := trainPlan(t, src(sched, zero, ""), false)
			_, one := trainPlan(t, src(sched, zero, ""), true)
			for _, off := range []string{"optimizer", "optimizer+params"} {
				name := fmt.Sprintf("%s zero=%d offload=%s", sched, zero, off)
				p, res := trainPlan(t, src(sched, zero, off), false)
				requireSameTraining(t, ref, res, name)
				d := CompareTensors(res.Param("W"), one.Final[0], 1e-5, 1e-6)
				require.True(t, d.OK, "%s: W off by %g", name, d.MaxAbs)
				// W's state is on the first stage's hosts only (split over
				// dp=2 from ZeRO-1 on)
				for dv, st := range res.Last.Devices {
					want := int64(0)
					if p.Exec.Mesh.Coord(dv)[1] == 0 {
						want = 12 * 16
						if zero > 0 {
							want /= 2
						}
					}
					require.Equal(t, want, st.HostHeld, "%s device %d", name, dv)
				}
			}
		}
	}
}

// The shipped example: two unequal stages (W1, b1, W2: 16·32+32+32·32 =
// 1568 parameters; W3, W4: 32·32+32·4 = 1152) over dp=2 with ZeRO-1 and
// bf16, so each rank copies 2 bytes for each of half its stage's elements
// each way — 1568 B and 1152 B — plus 4 B each way for clipping's norm,
// whose pieces cross the cut through device memory. Its host holds 12
// bytes a held element (6·1568 and 6·1152 B), and its device's peak is
// below the same file's without offload.
func TestOffloadPipelineExample(t *testing.T) {
	src, err := os.ReadFile("../examples/train/mlp_offload_pipe.mesh")
	require.NoError(t, err)
	text := strings.Replace(string(src), "    steps = 20\n", "    steps = 2\n", 1)
	require.NotEqual(t, string(src), text)
	run := func(text string) (*lower.Plan, *TrainResult) {
		g, err := lang.CheckSource("mlp_offload_pipe.mesh", []byte(text), lang.CheckOptions{Dir: "../examples/train"})
		require.NoError(t, err)
		p, err := lower.Lower(g, lower.Options{Verify: true})
		require.NoError(t, err)
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err)
		return p, res
	}
	without := strings.Replace(text, "    offload = optimizer\n", "", 1)
	require.NotEqual(t, text, without)
	_, ref := run(without)
	p, res := run(text)
	stage := []int64{1568, 1152}
	for d, st := range res.Last.Devices {
		k := stage[p.Exec.Mesh.Coord(d)[0]]
		require.Equal(t, [2]int64{k + 4, k + 4}, [2]int64{st.ToHost, st.ToDevice}, "device %d", d)
		require.Equal(t, [2]int64{k, k}, [2]int64{copiedBy(st, "offload", ".grad.host"), copiedBy(st, "fetch", ".fetched")}, "device %d", d)
		require.Equal(t, 6*k, st.HostHeld, "device %d", d)
		require.Zero(t, st.Held, "device %d", d)
		require.Less(t, st.Peak, ref.Last.Devices[d].Peak, "device %d", d)
		require.Equal(t, [2]int64{p.Peak[d], p.HostPeak[d]}, [2]int64{st.Peak, st.HostPeak}, "device %d", d)
		t.Logf("device %d: peak %d B device (%d B without offload), %d B host; %d B to host, %d B to device per step", d, st.Peak, ref.Last.Devices[d].Peak, st.HostPeak, st.ToHost, st.ToDevice)
	}
}

// The timeline shows each rank's copies: in the Chrome trace every
// device's track sums its offload and fetch events' bytes to what its
// stage copies (TestOffloadPipelineCopiesPerStage's figures, 1F1B,
// ZeRO-2, bf16: a rank's 128 elements of gradients per micro-batch, its
// 128 of parameters once), and under ZeRO-2 each gradient's offload lies
// inside a backward action of its rank's track (it leaves the device the
// moment the backward reduces it).
func TestOffloadPipelineTimeline(t *testing.T) {
	p, res := trainPlan(t, offPipe("1f1b", 2, "bf16", "optimizer", false), false)
	var buf strings.Builder
	require.NoError(t, WriteChromeTrace(&buf, p.Exec.Mesh, res.Last))
	var doc struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Cat  string         `json:"cat"`
			Ts   float64        `json:"ts"`
			Dur  float64        `json:"dur"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal([]byte(buf.String()), &doc))
	sum := map[[2]any]float64{}
	type span struct{ from, to float64 }
	backward := map[int][]span{}
	for _, e := range doc.TraceEvents {
		if e.Cat == "pipeline" && e.Args["kind"] == "B" {
			backward[e.Tid] = append(backward[e.Tid], span{e.Ts, e.Ts + e.Dur})
		}
	}
	inside := 0
	for _, e := range doc.TraceEvents {
		if e.Cat != "offload" && e.Cat != "fetch" {
			continue
		}
		sum[[2]any{e.Tid, e.Cat}] += e.Args["bytes_copied"].(float64)
		if e.Cat == "offload" {
			for _, b := range backward[e.Tid] {
				if e.Ts >= b.from && e.Ts+e.Dur <= b.to {
					inside++
					break
				}
			}
		}
	}
	for d := range res.Last.Devices {
		require.Equal(t, float64(2*128*4), sum[[2]any{d, "offload"}], "device %d", d)
		require.Equal(t, float64(2*128), sum[[2]any{d, "fetch"}], "device %d", d)
	}
	require.Equal(t, 8*4*4, inside, "every gradient's offload (4 matrices, 4 micro-batches, 8 devices) inside a backward")
}

// Under MPI a rank's statistics travel to rank 0 flattened against its
// own program: a pipelined plan's ranks run different programs, and each
// one's host figures and copy events survive the trip.
func TestOffloadPipelineStatsTravel(t *testing.T) {
	p, res := trainPlan(t, offPipe("1f1b", 1, "f16", "optimizer", true), false)
	for _, d := range []int{0, 7} { // first and last stage
		st := res.Last.Devices[d]
		var perInstr []Event
		for _, e := range st.Events {
			if e.Kind != "ring" {
				perInstr = append(perInstr, e)
			}
		}
		require.Len(t, perInstr, len(p.Exec.ProgramOf(d).Instrs))
		st.Events = perInstr
		back := decodeStats(d, p.Exec.ProgramOf(d), encodeStats(st))
		require.Equal(t, [4]int64{st.HostPeak, st.HostFinal, st.ToHost, st.ToDevice}, [4]int64{back.HostPeak, back.HostFinal, back.ToHost, back.ToDevice}, "device %d", d)
		h, dv, _ := copied(back)
		require.Equal(t, [2]int64{st.ToHost, st.ToDevice}, [2]int64{h, dv}, "device %d", d)
	}
}

// Activation checkpointing recomputes a stage's forward in its backward;
// the fetched parameters it reads come with it. With ZeRO-3 and either
// offload, under the naive schedule (one micro-batch), 1F1B and ZB-V, the
// run equals the same pipeline's without offload bit for bit.
func TestOffloadPipelineWithCheckpointing(t *testing.T) {
	for _, sched := range []string{"naive", "1f1b", "zbv"} {
		base := "    zero = 3\n    precision = bf16\n"
		_, ref := trainPlan(t, pipe3D(sched, base, true), false)
		for _, off := range []string{"optimizer", "optimizer+params"} {
			_, res := trainPlan(t, pipe3D(sched, base+"    offload = "+off+"\n", true), false)
			requireSameTraining(t, ref, res, sched+" offload="+off)
		}
	}
}

// A local function (ring attention's explicit shifts over the sequence
// axis s) reads fetched parameters like any op, and its sends and
// receives move device memory: with either offload the run equals the one
// without, bit for bit, on its own and on a 1F1B pipeline stage. (Before
// the tier pass knew a local function's transfers it panicked on their
// receives, with or without a pipeline.)
func TestOffloadLocalFunction(t *testing.T) {
	src := func(pipe bool, off string) string {
		s := `mesh M = [pipeline pp=2, s=2]
use par
input X : f32[2, 4, 2] {s: S(1)} = normal(0, 1)
param Wq : f32[2, 2] = normal(0, 0.5)
param Wk : f32[2, 2] = normal(0, 0.5)
param W : f32[2, 2] = normal(0, 0.5)
input T : f32[2, 4, 2] = normal(0, 1)
train {
    a = par.ring_attention(X @ Wq, X @ Wk, X, 0.7, 1)
    stage = 1
    loss = mse(tanh(a @ W), T)
    pipeline = 1f1b
    microbatches = 2
    optimizer = adam(lr=0.1)
    steps = 3
`
		if off != "" {
			s += "    offload = " + off + "\n"
		}
		s += "}\n"
		if !pipe {
			s = withoutPipeline(s)
		}
		return s
	}
	for _, pipe := range []bool{false, true} {
		_, ref := trainPlan(t, src(pipe, ""), false)
		for _, off := range []string{"optimizer", "optimizer+params"} {
			name := fmt.Sprintf("pipeline=%v offload=%s", pipe, off)
			p, res := trainPlan(t, src(pipe, off), false)
			require.True(t, p.Exec.HasHost(), name)
			require.Equal(t, pipe, p.Pipe != nil, name)
			requireSameTraining(t, ref, res, name)
		}
	}
}

// explain's pipeline note on offload: where a pipeline copies per
// micro-batch (ZeRO-2/3's gradients, optimizer+params' fetches for each
// backward) it names the rank that copies the most and its bytes per
// step next to copying each tensor once; both figures are the runtime's
// (its copy events, all of them, and with each instruction name counted
// once). Under ZeRO-1 with offload = optimizer a step copies each tensor
// once, and there is no note.
func TestOffloadPipelineNote(t *testing.T) {
	re := regexp.MustCompile(`^offload on a pipeline copies per micro-batch \(.*\): rank (\d+) copies (.+) between device and host per step, ([0-9.]+)× the (.+) of copying each tensor once \(4 micro-batches\)$`)
	for _, c := range []struct {
		zero int
		off  string
		want bool
	}{{1, "optimizer", false}, {1, "optimizer+params", true}, {2, "optimizer", true}, {3, "optimizer+params", true}} {
		name := fmt.Sprintf("zero=%d offload=%s", c.zero, c.off)
		p, res := trainPlan(t, offPipe("1f1b", c.zero, "bf16", c.off, false), false)
		var m []string
		for _, n := range lower.Explain(p).Pipeline.Notes {
			if strings.HasPrefix(n, "offload") {
				require.Nil(t, m, "one note")
				m = re.FindStringSubmatch(n)
				require.NotNil(t, m, n)
			}
		}
		if !c.want {
			require.Nil(t, m, name)
			continue
		}
		require.NotNil(t, m, name)
		// the rank copying the most, measured
		most, rank := int64(-1), -1
		for d, st := range res.Last.Devices {
			if n := st.ToHost + st.ToDevice; n > most {
				most, rank = n, p.Exec.Mesh.Coord(d)[0]
			}
		}
		require.Equal(t, strconv.Itoa(rank), m[1], name)
		st := res.Last.Devices[rank*4] // pp is the first of pp×dp×tp = 2×2×2
		once, seen := int64(0), map[string]bool{}
		for _, e := range st.Events {
			if e.Copied > 0 && !seen[e.Name] {
				seen[e.Name] = true
				once += e.Copied
			}
		}
		require.Equal(t, lower.HumanBytes(float64(st.ToHost+st.ToDevice)), m[2], name)
		require.Equal(t, lower.HumanBytes(float64(once)), m[4], name)
		require.Equal(t, fmt.Sprintf("%.1f", float64(st.ToHost+st.ToDevice)/float64(once)), m[3], name)
	}
}
