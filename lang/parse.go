package lang

import (
	"errors"
	"strings"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

var meshLexer = lexer.MustSimple([]lexer.SimpleRule{
	{Name: "Comment", Pattern: `#[^\n]*`},
	{Name: "String", Pattern: `"(\\.|[^"\\\n])*"`},
	{Name: "Float", Pattern: `\d+\.\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|\d+[eE][-+]?\d+`},
	{Name: "Int", Pattern: `\d+`},
	{Name: "Ident", Pattern: `[A-Za-z_][A-Za-z0-9_]*`},
	{Name: "Punct", Pattern: `[-+*/@(){}\[\],:=.]`},
	{Name: "Whitespace", Pattern: `\s+`},
})

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
			return nil, ErrorList{{Pos: perr.Position(), Msg: cleanParseMessage(perr.Message())}}
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

func cleanParseMessage(m string) string {
	m = strings.ReplaceAll(m, `unexpected token "<EOF>"`, "unexpected end of file")
	return m
}
