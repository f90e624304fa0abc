package lang

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

var parser = participle.MustBuild[File](
	participle.Lexer(meshLexer),
	participle.Elide("Comment", "Whitespace"),
	participle.Unquote("String"),
	participle.UseLookahead(4),
)

// Grammar returns the EBNF of the language, generated from the parser.
func Grammar() string { return parser.String() }

// Parse parses a .mesh source. Errors carry file:line:col positions.
func Parse(filename string, src []byte) (*File, error) {
	f, err := parser.ParseBytes(filename, src)
	if err != nil {
		var perr participle.Error
		if errors.As(err, &perr) {
			return nil, ErrorList{{Pos: backToText(src, perr.Position()), Msg: cleanParseMessage(perr.Message())}}
		}
		return nil, ErrorList{{Pos: lexer.Position{Filename: filename, Line: 1, Column: 1}, Msg: err.Error()}}
	}
	return f, nil
}

// ParseExpr parses a single expression (the REPL tries this first).
func ParseExpr(filename string, src []byte) (*Expr, error) {
	f, err := Parse(filename, src)
	if err != nil {
		return nil, err
	}
	if len(f.Stmts) != 1 || f.Stmts[0].Expr == nil {
		return nil, ErrorList{{Pos: f.Pos, Msg: "not a single expression"}}
	}
	return f.Stmts[0].Expr, nil
}

// backToText moves a position that points past the last token (an error at
// the end of the file) back to just after the last non-blank character, so
// the caret lands on the line that is unfinished.
func backToText(src []byte, p lexer.Position) lexer.Position {
	if p.Offset < len(bytes.TrimRight(src, " \t\r\n")) {
		return p
	}
	text := bytes.TrimRight(src, " \t\r\n")
	line := 1 + bytes.Count(text, []byte("\n"))
	col := len(text) - bytes.LastIndexByte(text, '\n')
	p.Line, p.Column, p.Offset = line, col+1, len(text)
	return p
}

// cleanParseMessage words participle's messages for users: the end of
// input is named as such, and an "(expected ...)" hint is kept only when it
// names a single token rather than a piece of grammar.
func cleanParseMessage(m string) string {
	m = strings.ReplaceAll(m, `unexpected token "<EOF>"`, "unexpected end of file")
	// an integer token too large for an int field (a dim, a mesh axis, a
	// loop count) fails in strconv; say so in the program's terms
	if _, rest, ok := strings.Cut(m, "strconv.ParseInt: parsing "); ok {
		if q, reason, ok := strings.Cut(rest, ": "); ok && reason == "value out of range" {
			return fmt.Sprintf("integer %s is too large (at most %d)", strings.Trim(q, `"`), math.MaxInt)
		}
	}
	if rest, ok := strings.CutPrefix(strings.TrimPrefix(m, "lexer: "), "invalid input text "); ok {
		if q, err := strconv.Unquote(rest); err == nil && q != "" {
			r, _ := utf8.DecodeRuneInString(q)
			return fmt.Sprintf("unexpected character %q", r)
		}
	}
	if i := strings.Index(m, " (expected "); i >= 0 {
		hint := strings.TrimSuffix(m[i+len(" (expected "):], ")")
		if strings.ContainsAny(hint, " *?|") {
			m = m[:i]
		}
	}
	return m
}
