// Package stdlib embeds the library modules written in the .mesh language
// itself. `use nn` in a program makes nn.mesh's functions callable as
// nn.NAME(...). The checker parses and checks them like user code, so their
// errors point into stdlib/NAME.mesh.
package stdlib

import (
	"embed"
	"sort"
	"strings"
)

//go:embed *.mesh
var files embed.FS

// Source returns the text of module name.
func Source(name string) ([]byte, bool) {
	b, err := files.ReadFile(name + ".mesh")
	return b, err == nil
}

// Modules lists the module names.
func Modules() []string {
	ents, _ := files.ReadDir(".")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".mesh"))
	}
	sort.Strings(out)
	return out
}
