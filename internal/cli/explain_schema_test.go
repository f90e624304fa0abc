package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// conform reports where doc departs from schema (testdata/explain.schema.json
// says how the schema is written).
func conform(schema, doc any, path string) []string {
	if doc == nil {
		return []string{path + ": null"}
	}
	switch s := schema.(type) {
	case string:
		return conformScalar(s, doc, path)
	case []any:
		d, ok := doc.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want a list, got %T", path, doc)}
		}
		var errs []string
		for i, e := range d {
			errs = append(errs, conform(s[0], e, fmt.Sprintf("%s[%d]", path, i))...)
		}
		return errs
	case map[string]any:
		return conformObject(s, doc, path)
	}
	return []string{path + ": bad schema"}
}

func conformScalar(kind string, doc any, path string) []string {
	ok := false
	switch v := doc.(type) {
	case string:
		ok = kind == "str"
	case bool:
		ok = kind == "bool"
	case float64:
		ok = kind == "num" || kind == "int" && v == math.Trunc(v)
	}
	if !ok {
		return []string{fmt.Sprintf("%s: want %s, got %v", path, kind, doc)}
	}
	return nil
}

func conformObject(s map[string]any, doc any, path string) []string {
	d, ok := doc.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("%s: want an object, got %T", path, doc)}
	}
	var errs []string
	for k, v := range d {
		sub, ok := s[k]
		if !ok {
			sub, ok = s[k+"?"]
		}
		if !ok {
			sub, ok = s["*"]
		}
		if !ok {
			errs = append(errs, fmt.Sprintf("%s.%s: not in the schema", path, k))
			continue
		}
		errs = append(errs, conform(sub, v, path+"."+k)...)
	}
	for k := range s {
		if k != "#" && k != "*" && !strings.HasSuffix(k, "?") {
			if _, ok := d[k]; !ok {
				errs = append(errs, fmt.Sprintf("%s.%s: missing", path, k))
			}
		}
	}
	return errs
}

// explain --json follows its schema for programs with and without
// collectives, inputs, outputs and a train block, and with scalars.
func TestExplainJSONFollowsItsSchema(t *testing.T) {
	raw, err := os.ReadFile("testdata/explain.schema.json")
	require.NoError(t, err)
	var schema map[string]any
	require.NoError(t, json.Unmarshal(raw, &schema))
	delete(schema, "#")
	dir := t.TempDir()
	scalar := writeFile(t, dir, "scalar.mesh", "mesh M = [dp=2]\nparam w : f32[] {B} = ones\ny = w * 2.0\noutput y\n")
	bare := writeFile(t, dir, "bare.mesh", "mesh M = [dp=2]\ninput x : f32[4] {S(0)} = ones\n")
	local := writeFile(t, dir, "local.mesh", "mesh M = [r=2, c=2]\nuse par\ninput x : f32[4, 4] = ones\ny = par.summa(x, x)\noutput y\n")
	for _, f := range []string{scalar, bare, local, "../../examples/megatron_mlp.mesh", "../../examples/train/mlp_dp.mesh", "../../examples/train/mlp_offload.mesh", "../../examples/train/gpt/gpt_3d.mesh"} {
		code, out, errs := meshrun(t, "", "explain", "--json", f)
		require.Equal(t, ExitOK, code, errs)
		var doc any
		require.NoError(t, json.Unmarshal([]byte(out), &doc))
		require.Empty(t, conform(schema, doc, filepath.Base(f)))
	}
	// the checker itself catches what it must
	require.NotEmpty(t, conform(schema, map[string]any{"mesh": nil}, "doc"))
	require.NotEmpty(t, conform([]any{"int"}, []any{1.5}, "doc"))
}
