package lower

import (
	"github.com/meshrun/meshrun/lang"
)

// CompileFile chains lang.CheckFile and Lower. sources (returned even on
// error) lets the caller render diagnostics with their source lines.
func CompileFile(path string, copts lang.CheckOptions, opts Options) (*Plan, map[string][]byte, error) {
	g, sources, err := lang.CheckFile(path, copts)
	if err != nil {
		return nil, sources, err
	}
	p, err := Lower(g, opts)
	return p, sources, err
}
