package pipeline

import (
	"encoding/json"
	"fmt"
)

// chromeEvent is one record of the Chrome trace event format (Perfetto,
// chrome://tracing): "X" is a complete event with a duration, "M" names a
// track.
type chromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// ChromeTrace writes the events as Chrome trace JSON with one track per
// rank. usPerUnit converts event times to the format's microseconds (1e6
// when events are in seconds). Every event is kept, communication
// included, named by its action ("2F3", "1SEND_B0").
func ChromeTrace(events []Event, ranks int, usPerUnit float64) ([]byte, error) {
	if usPerUnit <= 0 {
		return nil, fmt.Errorf("chrome trace: microseconds per time unit must be positive, got %g", usPerUnit)
	}
	out := make([]chromeEvent, 0, len(events)+ranks)
	for r := range ranks {
		out = append(out, chromeEvent{Name: "thread_name", Ph: "M", Tid: r,
			Args: map[string]any{"name": fmt.Sprintf("rank %d", r)}})
	}
	for _, e := range events {
		out = append(out, chromeEvent{Name: e.Action().String(), Cat: e.Kind.String(), Ph: "X",
			Ts: e.Start * usPerUnit, Dur: (e.End - e.Start) * usPerUnit, Tid: e.Rank,
			Args: map[string]any{"stage": e.Stage, "micro": e.Micro}})
	}
	return json.MarshalIndent(map[string]any{"traceEvents": out, "displayTimeUnit": "ms"}, "", " ")
}
