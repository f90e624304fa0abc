package rt

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

// ZeRO-Offload (offload = optimizer | optimizer+params): the update runs
// in each rank's host tier, and the step copies gradients there and
// parameters back. These tests hold the offloaded run to the run without
// offload (same losses and parameters, bit for bit), and read the copies'
// bytes and the two tiers' memory from what the runtime measured.

// offloadProgram is zeroProgram's model (every parameter is read by the
// backward) with a precision, a ZeRO stage, an offload setting and
// optionally clipping (whose global norm is reduced in host memory).
func offloadProgram(zero int, prec, offload string, clip bool) string {
	extra := ""
	if prec != "" {
		extra += "    precision = " + prec + "\n"
	}
	if offload != "" {
		extra += "    offload = " + offload + "\n"
	}
	if clip {
		extra += "    clip = 0.5\n"
	}
	return fmt.Sprintf(`mesh M = [dp=4]
input x  : f32[16, 8] {S(0)} = normal(0, 1)
param W1 : f32[8, 8]  {B} = normal(0, 0.5)
param W2 : f32[8, 4]  {B} = normal(0, 0.5)
input t  : f32[16, 4] {S(0)} = normal(0, 1)
train {
    h = tanh(tanh(x @ W1) @ W1)
    loss = mse(h @ W2, t)
    optimizer = adam(lr=0.01)
    steps = 4
    zero = %d
%s}
`, zero, extra)
}

const offloadPsi = 8*8 + 8*4 // parameters

func compileSrc(t *testing.T, src string) *lower.Plan {
	t.Helper()
	g, err := lang.CheckSource("m.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err, lang.Render(err, map[string][]byte{"m.mesh": []byte(src)}))
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	return p
}

func trainSrc(t *testing.T, src string) (*lower.Plan, *TrainResult) {
	t.Helper()
	p := compileSrc(t, src)
	res, err := Train(context.Background(), p, Options{}, TrainConfig{})
	require.NoError(t, err)
	return p, res
}

// With gradient accumulation each micro-batch's reduced gradients go to
// the host (ZeRO-2: the moment the backward reduces them) and add up
// there; the step still equals the run without offload.
func TestOffloadWithAccumulation(t *testing.T) {
	for _, zero := range []int{0, 2} {
		src := func(off string) string {
			s := offloadProgram(zero, "bf16", off, false)
			return strings.Replace(s, "    steps = 4\n", "    steps = 3\n    accumulate = 2\n", 1)
		}
		_, ref := trainSrc(t, src(""))
		_, res := trainSrc(t, src("optimizer"))
		require.Equal(t, ref.Losses, res.Losses, "zero=%d", zero)
		for i := range ref.Final {
			require.Equal(t, ref.Final[i].Float64s(), res.Final[i].Float64s(), "zero=%d %s", zero, res.Params[i].Name)
		}
		want := int64(2 * offloadPsi)
		if zero == 2 {
			want = 2 * want / 4 // once per micro-batch, a quarter each
		}
		toHost, _, _ := copied(res.Last.Devices[0])
		require.Equal(t, want, toHost, "zero=%d", zero)
	}
}

// Offloading changes where the update runs, not what it computes: every
// step's loss and every final parameter equal the run without offload,
// exactly, with and without ZeRO, in f32, bf16 and f16 (loss scaling),
// with clipping.
func TestOffloadTrainsLikeWithout(t *testing.T) {
	for _, zero := range []int{0, 1, 2, 3} {
		for _, prec := range []string{"", "bf16", "f16"} {
			for _, clip := range []bool{false, true} {
				if clip && prec == "bf16" {
					continue // clipping is covered by f32 and f16
				}
				_, ref := trainSrc(t, offloadProgram(zero, prec, "", clip))
				for _, off := range []string{"optimizer", "optimizer+params"} {
					name := fmt.Sprintf("zero=%d precision=%q clip=%v offload=%s", zero, prec, clip, off)
					p, res := trainSrc(t, offloadProgram(zero, prec, off, clip))
					require.True(t, p.Exec.HasHost(), name)
					require.Len(t, res.Losses, 4, name)
					require.Equal(t, ref.Losses, res.Losses, name)
					require.Equal(t, len(ref.Final), len(res.Final), name)
					for i := range ref.Final {
						require.Equal(t, ref.Final[i].Float64s(), res.Final[i].Float64s(), "%s: %s", name, res.Params[i].Name)
					}
				}
			}
		}
	}
}

// copied sums what device d's offload and fetch events copied, as the
// runtime measured it.
func copied(st DeviceStats) (toHost, toDevice int64, events int) {
	for _, e := range st.Events {
		switch e.Kind {
		case plan.Offload.String():
			toHost += e.Copied
			events++
		case plan.Fetch.String():
			toDevice += e.Copied
			events++
		}
	}
	return toHost, toDevice, events
}

// Per step each device copies its reduced gradients to the host and the
// parameters it reads back, in the precision the forward computes in:
// with bf16, 2Ψ bytes each way (ZeRO-Offload's figure), 2Ψ/N_d under ZeRO
// (each host keeps its own part); with f32, 4Ψ. offload = optimizer+params
// fetches each parameter again for the backward (this model's backward
// reads every one): twice the bytes to the device. The figures are the
// runtime's, from its copy events; the plan's count (explain) agrees.
func TestOffloadCopiesPerStep(t *testing.T) {
	for _, zero := range []int{0, 2, 3} {
		for _, prec := range []string{"", "bf16"} {
			for _, off := range []string{"optimizer", "optimizer+params"} {
				name := fmt.Sprintf("zero=%d precision=%q offload=%s", zero, prec, off)
				p, res := trainSrc(t, offloadProgram(zero, prec, off, false))
				elem := int64(4)
				if prec != "" {
					elem = 2
				}
				want := elem * offloadPsi
				if zero > 0 {
					want /= 4
				}
				back := want
				if off == "optimizer+params" {
					back *= 2
				}
				for d, st := range res.Last.Devices {
					toHost, toDevice, n := copied(st)
					require.Positive(t, n, name)
					require.Equal(t, want, toHost, "%s device %d: gradients to the host", name, d)
					require.Equal(t, back, toDevice, "%s device %d: parameters to the device", name, d)
					require.Equal(t, toHost, st.ToHost, name)
					require.Equal(t, toDevice, st.ToDevice, name)
					h, dv := lower.CopiedBytes(p.Exec, d)
					require.Equal(t, [2]int64{toHost, toDevice}, [2]int64{h, dv}, "%s: plan and runtime", name)
				}
			}
		}
	}
}

// The two tiers' memory: the runtime's measured device and host peaks
// equal the plan's; between steps the device holds nothing of the model's
// state and the host holds the ZeRO paper's K·Ψ/N_d (f32 master weights
// and Adam's two moments: 12 bytes a parameter, split over the 4 devices
// from stage 1 on); and the device's peak falls below the run without
// offload, and further with optimizer+params.
func TestOffloadMemoryTiers(t *testing.T) {
	for _, zero := range []int{0, 2} {
		pRef, ref := trainSrc(t, offloadProgram(zero, "bf16", "", false))
		var peaks []int64
		for _, off := range []string{"optimizer", "optimizer+params"} {
			name := fmt.Sprintf("zero=%d offload=%s", zero, off)
			p, res := trainSrc(t, offloadProgram(zero, "bf16", off, false))
			state := int64(12 * offloadPsi)
			if zero > 0 {
				state /= 4
			}
			for d, st := range res.Last.Devices {
				require.Equal(t, p.Peak[d], st.Peak, "%s device %d: device peak", name, d)
				require.Equal(t, p.HostPeak[d], st.HostPeak, "%s device %d: host peak", name, d)
				require.Zero(t, st.Held, name)
				require.Equal(t, state, st.HostHeld, name)
				require.Less(t, st.Peak, ref.Last.Devices[d].Peak, name)
				require.Equal(t, pRef.Peak[d], ref.Last.Devices[d].Peak)
			}
			peaks = append(peaks, p.Peak[0])
		}
		require.LessOrEqual(t, peaks[1], peaks[0], "zero=%d: optimizer+params keeps less on the device", zero)
	}
}

// The timeline shows the copies: one event per offload and fetch, with
// the bytes copied, in the Chrome trace too.
func TestOffloadTimeline(t *testing.T) {
	p, res := trainSrc(t, offloadProgram(2, "bf16", "optimizer", false))
	var buf strings.Builder
	require.NoError(t, WriteChromeTrace(&buf, p.Exec.Mesh, res.Last))
	var doc struct {
		TraceEvents []struct {
			Cat  string         `json:"cat"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal([]byte(buf.String()), &doc))
	sum := map[string]float64{}
	for _, e := range doc.TraceEvents {
		if e.Tid == 1 && (e.Cat == "offload" || e.Cat == "fetch") {
			sum[e.Cat] += e.Args["bytes_copied"].(float64)
		}
	}
	want := float64(2 * offloadPsi / 4)
	require.Equal(t, map[string]float64{"offload": want, "fetch": want}, sum)
}

// Under MPI a rank's statistics travel to rank 0 flattened: the host
// tier's figures and each copy event's bytes survive the trip.
func TestOffloadStatsTravel(t *testing.T) {
	p, res := trainSrc(t, offloadProgram(2, "bf16", "optimizer", false))
	st := res.Last.Devices[1]
	st.HostHeld, st.Held = 288, 0
	var perInstr []Event // under MPI a rank records one event per instruction (no ring steps)
	for _, e := range st.Events {
		if e.Kind != "ring" {
			perInstr = append(perInstr, e)
		}
	}
	require.Len(t, perInstr, len(p.Exec.ProgramOf(1).Instrs))
	st.Events = perInstr
	back := decodeStats(1, p.Exec.ProgramOf(1), encodeStats(st))
	require.Equal(t, st.HostPeak, back.HostPeak)
	require.Equal(t, st.HostFinal, back.HostFinal)
	require.Equal(t, st.HostHeld, back.HostHeld)
	require.Equal(t, [2]int64{st.ToHost, st.ToDevice}, [2]int64{back.ToHost, back.ToDevice})
	h, d, n := copied(back)
	require.Equal(t, [3]int64{st.ToHost, st.ToDevice, 4}, [3]int64{h, d, int64(n)}) // W1's and W2's offload and fetch
}

// Every optimizer's update runs on the host to the same numbers: SGD (no
// state), momentum, Adam with L2 weight decay and AdamW, under ZeRO-1.
func TestOffloadEveryOptimizer(t *testing.T) {
	for _, opt := range []string{"sgd(lr=0.1)", "momentum(lr=0.05, momentum=0.9)", "adam(lr=0.01, weight_decay=0.1)", "adamw(lr=0.01, weight_decay=0.1)"} {
		src := func(off string) string {
			return strings.Replace(offloadProgram(1, "", off, false), "adam(lr=0.01)", opt, 1)
		}
		require.Contains(t, src(""), opt)
		_, ref := trainSrc(t, src(""))
		p, res := trainSrc(t, src("optimizer"))
		require.True(t, p.Exec.HasHost(), opt)
		require.Equal(t, ref.Losses, res.Losses, opt)
		for i := range ref.Final {
			require.Equal(t, ref.Final[i].Float64s(), res.Final[i].Float64s(), "%s: %s", opt, res.Params[i].Name)
		}
	}
}

// offload = optimizer adds copies, not communication: every device sends
// the bytes it sends without offload, measured, for every ZeRO stage.
// optimizer+params keeps no gathered copy for the backward, so under
// ZeRO-1/2 it gathers again for the backward: it sends what ZeRO-3 sends.
func TestOffloadSendsWhatItSendsWithout(t *testing.T) {
	for _, prec := range []string{"", "bf16"} {
		ref := map[int]*TrainResult{}
		for zero := 0; zero <= 3; zero++ {
			_, ref[zero] = trainSrc(t, offloadProgram(zero, prec, "", false))
		}
		for zero := 0; zero <= 3; zero++ {
			for _, off := range []string{"optimizer", "optimizer+params"} {
				like := ref[zero]
				if off == "optimizer+params" && zero > 0 {
					like = ref[3]
				}
				_, res := trainSrc(t, offloadProgram(zero, prec, off, false))
				for d := range res.Last.Devices {
					require.Equal(t, like.Last.Devices[d].BytesSent, res.Last.Devices[d].BytesSent, "zero=%d precision=%q offload=%s device %d", zero, prec, off, d)
				}
			}
		}
		require.Greater(t, ref[3].Last.Devices[0].BytesSent, ref[2].Last.Devices[0].BytesSent)
	}
}
