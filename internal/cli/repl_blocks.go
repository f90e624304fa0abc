package cli

import (
	"fmt"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
)

// blocks runs ':blocks' and ':blocks step': the blocks view (explain
// --blocks) of the last local function call, all at once or one
// collective per Enter.
func (s *session) blocks(arg string) {
	if arg != "" && arg != "step" {
		fmt.Fprintf(s.out, ":blocks: unknown argument %q (':blocks' or ':blocks step')\n", arg)
		return
	}
	if s.checker.Graph().Mesh == nil {
		fmt.Fprintln(s.out, ":blocks: declare a mesh first")
		return
	}
	p, err := s.lowerWith(nil)
	if err != nil {
		fmt.Fprint(s.out, lang.Render(err, s.checker.Graph().Sources))
		return
	}
	r := lower.Blocks(p)
	last := -1
	for i, c := range r.Calls {
		if !c.Backward {
			last = i
		}
	}
	if last < 0 {
		fmt.Fprintln(s.out, ":blocks: no local function has been called (define one with `local def`, or `use par`)")
		return
	}
	pages := r.Pages(last)
	fmt.Fprint(s.out, lower.BlocksLegend)
	if arg == "" {
		for _, pg := range pages {
			fmt.Fprint(s.out, pg)
		}
		return
	}
	fmt.Fprint(s.out, pages[0])
	s.pages = pages[1:]
	fmt.Fprintln(s.out, "  (Enter: next collective; any other input stops)")
}

// stepBlocks shows the next page of a ':blocks step' walk when the line
// is empty, and reports whether it did; any other line ends the walk.
func (s *session) stepBlocks(empty bool) bool {
	if len(s.pages) == 0 {
		return false
	}
	if !empty {
		s.pages = nil
		return false
	}
	fmt.Fprint(s.out, s.pages[0])
	s.pages = s.pages[1:]
	if len(s.pages) == 0 {
		fmt.Fprintln(s.out, "  (end of the call)")
	}
	return true
}
