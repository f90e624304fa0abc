package pipeline

import (
	"math"
	"testing"
)

func TestParseSpec(t *testing.T) {
	good := []struct {
		spec string
		name string
		v    int
	}{
		{"1f1b", "1f1b", 0},
		{" GPipe ", "gpipe", 0},
		{"interleaved(2)", "interleaved", 2},
		{"interleaved( 3 )", "interleaved", 3},
		{"zbv", "zbv", 0},
		{"zbv(2)", "zbv", 2},
	}
	for _, c := range good {
		name, v, err := ParseSpec(c.spec)
		if err != nil || name != c.name || v != c.v {
			t.Errorf("ParseSpec(%q) = %q, %d, %v; want %q, %d", c.spec, name, v, err, c.name, c.v)
		}
	}
	for _, spec := range []string{"interleaved", "interleaved(1)", "interleaved(x)", "interleaved(2", "1f1b(2)", "dualpipe", ""} {
		if name, v, err := ParseSpec(spec); err == nil {
			t.Errorf("ParseSpec(%q) = %q, %d; want an error", spec, name, v)
		}
	}
	s, err := FromSpec("interleaved(3)", 2, 4)
	if err != nil || s.Stages != 6 {
		t.Fatalf("FromSpec: %v, %v", s, err)
	}
}

// The formulas at a few sizes, worked out by hand.
func TestFormula(t *testing.T) {
	cases := []struct {
		name        string
		ranks, m, v int
		want        float64
		ok          bool
	}{
		{"naive", 4, 8, 0, 3.0 / 4, true},
		{"gpipe", 4, 8, 0, 3.0 / 11, true},
		{"1f1b", 2, 3, 0, 1.0 / 4, true},
		{"interleaved", 4, 8, 2, 3.0 / 19, true},
		{"interleaved", 4, 2, 2, 3.0 / 7, false},
		{"zb1p", 4, 8, 0, 3.0 / 27, true},
		{"zb1p", 8, 4, 0, 7.0 / 19, false},
		{"zbv", 4, 8, 0, 3.0 / 51, true},
		{"zbv", 4, 4, 0, 3.0 / 27, false},
	}
	for _, c := range cases {
		got, text, ok := Formula(c.name, c.ranks, c.m, c.v)
		if math.Abs(got-c.want) > 1e-15 || ok != c.ok || text == "" {
			t.Errorf("Formula(%s, K=%d, M=%d, v=%d) = %g, %q, %v; want %g, ok %v", c.name, c.ranks, c.m, c.v, got, text, ok, c.want, c.ok)
		}
	}
	if _, _, ok := Formula("dualpipe", 4, 8, 0); ok {
		t.Errorf("a formula for an unknown schedule")
	}
}
