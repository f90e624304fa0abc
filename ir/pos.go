package ir

import (
	"fmt"
	"strconv"

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
	// strconv rather than fmt: explain and the emitters format a position
	// per value, hundreds of thousands of times for a deep pipelined model
	return f + ":" + strconv.Itoa(p.Line) + ":" + strconv.Itoa(p.Column)
}

// AppendPos appends FormatPos(p) to b (no allocation: see Value.AppendWhere).
func AppendPos(b []byte, p Pos) []byte {
	if p.Filename == "" {
		b = append(b, "<input>"...)
	} else {
		b = append(b, p.Filename...)
	}
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(p.Line), 10)
	b = append(b, ':')
	return strconv.AppendInt(b, int64(p.Column), 10)
}

// Error is one diagnostic at a source position. Every phase reports this
// shape, so the CLI and the REPL render them the same way.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", FormatPos(e.Pos), e.Msg) }
