package rt

import "strings"

// cpuFlags reads the first "flags" line of /proc/cpuinfo's text.
func cpuFlags(cpuinfo string) map[string]bool {
	flags := map[string]bool{}
	for _, line := range strings.Split(cpuinfo, "\n") {
		name, val, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(name) == "flags" {
			for _, f := range strings.Fields(val) {
				flags[f] = true
			}
			break
		}
	}
	return flags
}

// coreTypeFor names the OpenBLAS kernels for a CPU with these flags:
// SkylakeX for AVX-512 (F, CD, BW, DQ, VL), Haswell for AVX2 with FMA, and
// "" (let OpenBLAS decide) below that.
func coreTypeFor(flags map[string]bool) string {
	all := func(names ...string) bool {
		for _, n := range names {
			if !flags[n] {
				return false
			}
		}
		return true
	}
	switch {
	case all("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"):
		return "SkylakeX"
	case all("avx2", "fma"):
		return "Haswell"
	}
	return ""
}
