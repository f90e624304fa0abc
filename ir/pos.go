package ir

import (
	"fmt"

	"github.com/alecthomas/participle/v2/lexer"
)

// Pos is a source position: file, line, column.
type Pos = lexer.Position

// FormatPos renders file:line:col.
func FormatPos(p Pos) string {
	f := p.Filename
	if f == "" {
		f = "<input>"
	}
	return fmt.Sprintf("%s:%d:%d", f, p.Line, p.Column)
}

// Error is one diagnostic at a source position. Every phase reports this
// shape, so the CLI and the REPL render them the same way.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", FormatPos(e.Pos), e.Msg) }
