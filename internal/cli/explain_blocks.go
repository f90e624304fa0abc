package cli

import (
	"fmt"

	"github.com/meshrun/meshrun/lower"
)

// explainBlocks prints the blocks view of the local function calls
// (explain --blocks), as text or as one JSON document.
func (e *env) explainBlocks(p *lower.Plan, asJSON bool) int {
	r := lower.Blocks(p)
	if asJSON {
		return e.writeJSON(r)
	}
	if len(r.Calls) == 0 {
		fmt.Fprintln(e.stdout, "no local function is called: --blocks steps through local functions (spec.md, Local functions)")
		return ExitOK
	}
	fmt.Fprint(e.stdout, r.Text())
	return ExitOK
}
