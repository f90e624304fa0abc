package lower

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// HumanBytes renders as the fmt verbs it used to (%.0f B, %.1f UNIT):
// values across every unit, their rounding boundaries, zero, negatives,
// infinities and NaN.
func TestHumanBytesIsTheFormattedText(t *testing.T) {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	ref := func(b float64) string {
		i := 0
		for b >= 1024 && i < len(units)-1 {
			b /= 1024
			i++
		}
		if i == 0 {
			return fmt.Sprintf("%.0f B", b)
		}
		return fmt.Sprintf("%.1f %s", b, units[i])
	}
	vals := []float64{0, 0.5, 1.5, 2.5, 1023, 1023.5, 1024, 1075.2, 98304, 1 << 20, 1.05 * (1 << 30), 1 << 40, 1 << 52,
		-1, -2048, math.Inf(1), math.Inf(-1), math.NaN(), math.Copysign(0, -1)}
	for e := 0; e < 60; e++ {
		for _, f := range []float64{1, 1.04999, 1.05, 1.95, 9.99, 999.95} {
			vals = append(vals, f*math.Ldexp(1, e))
		}
	}
	for _, b := range vals {
		require.Equal(t, ref(b), HumanBytes(b), "%v", b)
	}
}
