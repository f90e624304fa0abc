package ops

import "github.com/meshrun/meshrun/sbp"

// The placement vocabulary, named as in package sbp so that the rules read
// the same here.
type (
	SBP    = sbp.SBP
	Sig    = sbp.Sig
	NdSig  = sbp.NdSig
	OpDesc = sbp.OpDesc
	Rule   = sbp.Rule
)

var (
	B    = sbp.B
	P    = sbp.P
	PMax = sbp.PMax
)

// S is a split along dim.
func S(dim int) SBP { return sbp.S(dim) }

// register adds the placement rule of ops (sbp.Register).
func register(family string, r Rule, ops ...string) { sbp.Register(family, r, ops...) }

// repeat returns n copies of s.
func repeat(s SBP, n int) []SBP {
	out := make([]SBP, n)
	for i := range out {
		out[i] = s
	}
	return out
}
