package rt

import (
	"encoding/json"
	"io"

	"github.com/meshrun/meshrun/mesh"
)

// WriteChromeTrace writes the per-device timelines in the Chrome trace
// event format (load it in Perfetto or chrome://tracing): one track per
// device, one complete event per instruction, and on a pipeline one per
// action (stage, kind, micro-batch) around its instructions. An event the
// device timed (Event.OnDevice: its GPU span, from CUDA events) says so
// in its args ("clock": "device"), as does its track's name.
func WriteChromeTrace(w io.Writer, m *mesh.Mesh, res *Result) error {
	type ev struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Ph   string         `json:"ph"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur,omitempty"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Args map[string]any `json:"args,omitempty"`
	}
	var evs []ev
	for _, d := range res.Devices {
		track := "device " + m.CoordString(d.Device)
		if len(d.Events) > 0 && d.Events[0].OnDevice {
			track += " (device time)"
		}
		evs = append(evs, ev{Name: "thread_name", Ph: "M", Pid: 0, Tid: d.Device, Args: map[string]any{"name": track}})
		for _, e := range d.Events {
			args := map[string]any{"where": e.Where}
			if e.Bytes > 0 {
				args["bytes_sent"] = e.Bytes
			}
			if e.Copied > 0 { // offload, fetch: between device and host memory
				args["bytes_copied"] = e.Copied
			}
			if e.OnDevice {
				args["clock"] = "device"
			}
			evs = append(evs, ev{Name: e.Name, Cat: e.Kind, Ph: "X", Ts: float64(e.Start.Nanoseconds()) / 1e3, Dur: float64(e.Dur.Nanoseconds()) / 1e3, Pid: 0, Tid: d.Device, Args: args})
		}
		if d.Pipe == nil {
			continue
		}
		// a pipeline's actions enclose their instructions on the same track
		for _, s := range d.Pipe.Actions {
			evs = append(evs, ev{Name: s.Act.String(), Cat: "pipeline", Ph: "X", Ts: float64(s.Start.Nanoseconds()) / 1e3,
				Dur: float64((s.End - s.Start).Nanoseconds()) / 1e3, Pid: 0, Tid: d.Device,
				Args: map[string]any{"stage": s.Act.Stage, "micro": s.Act.Micro, "kind": s.Act.Kind.String()}})
		}
	}
	enc := json.NewEncoder(w)
	return enc.Encode(map[string]any{"traceEvents": evs, "displayTimeUnit": "ns"})
}
