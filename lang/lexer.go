package lang

import (
	"fmt"
	"io"
	"strings"

	"github.com/alecthomas/participle/v2/lexer"
)

// The tokens of the language are meshRules: regular expressions tried in
// order at each position, the first that matches making the token (as
// participle's simple lexer does). participle's lexer runs up to eight
// regular expressions per token, about half of the parse; the planner
// parses each candidate it rewrites. scanLexer makes the same tokens by
// hand, one pass over the bytes: the same types, values, positions and
// errors, which TestScanLexerMatchesTheRules and FuzzScanLexer check
// against participle's lexer of meshRules.
var meshRules = []lexer.SimpleRule{
	{Name: "Comment", Pattern: `#[^\n]*`},
	{Name: "String", Pattern: `"(\\.|[^"\\\n])*"`},
	{Name: "Keyword", Pattern: `\b(mesh|use|input|param|def|output|return|train|checkpoint|local|for)\b`},
	// 1f1b names a pipeline schedule (pipeline = 1f1b), not a number
	{Name: "Ident", Pattern: `1[fF]1[bB]\b|[A-Za-z_][A-Za-z0-9_]*`},
	{Name: "Float", Pattern: `\d+\.\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|\d+[eE][-+]?\d+`},
	{Name: "Int", Pattern: `\d+`},
	{Name: "Punct", Pattern: `[-+*/@(){}\[\],:=.>]`},
	{Name: "Whitespace", Pattern: `\s+`},
}

// The rules' indices in meshRules.
const (
	ruleComment = iota
	ruleString
	ruleKeyword
	ruleIdent
	ruleFloat
	ruleInt
	rulePunct
	ruleWhitespace
)

// regexLexer is participle's lexer of meshRules: scanLexer's reference,
// and the source of the token types both use.
var regexLexer = lexer.MustSimple(meshRules)

var meshLexer = newScanLexer()

type scanDefinition struct {
	symbols map[string]lexer.TokenType
	types   [len(rulesOrder)]lexer.TokenType // by rule index
}

// rulesOrder names the rules in meshRules' order (checked at start-up).
var rulesOrder = [...]string{"Comment", "String", "Keyword", "Ident", "Float", "Int", "Punct", "Whitespace"}

func newScanLexer() *scanDefinition {
	d := &scanDefinition{symbols: regexLexer.Symbols()}
	for i, name := range rulesOrder {
		if meshRules[i].Name != name {
			panic("lang: meshRules and rulesOrder disagree at " + name)
		}
		d.types[i] = d.symbols[name]
	}
	return d
}

func (d *scanDefinition) Symbols() map[string]lexer.TokenType { return d.symbols }

func (d *scanDefinition) Lex(filename string, r io.Reader) (lexer.Lexer, error) {
	var b strings.Builder
	if _, err := io.Copy(&b, r); err != nil {
		return nil, err
	}
	return d.LexString(filename, b.String())
}

func (d *scanDefinition) LexString(filename string, s string) (lexer.Lexer, error) {
	return &scanLexer{def: d, data: s, pos: lexer.Position{Filename: filename, Line: 1, Column: 1}}, nil
}

func (d *scanDefinition) LexBytes(filename string, b []byte) (lexer.Lexer, error) {
	return d.LexString(filename, string(b))
}

type scanLexer struct {
	def  *scanDefinition
	data string
	pos  lexer.Position
}

func (l *scanLexer) Next() (lexer.Token, error) {
	if len(l.data) == 0 {
		return lexer.EOFToken(l.pos), nil
	}
	rule, n := scanToken(l.data)
	if n == 0 {
		sample := []rune(l.data)
		if len(sample) > 16 {
			sample = append(sample[:16], []rune("...")...)
		}
		return lexer.Token{}, &lexer.Error{Msg: fmt.Sprintf("lexer: invalid input text %q", string(sample)), Pos: l.pos}
	}
	span := l.data[:n]
	l.data = l.data[n:]
	pos := l.pos
	l.pos.Advance(span)
	return lexer.Token{Type: l.def.types[rule], Value: span, Pos: pos}, nil
}

// scanToken is the first of meshRules that matches at the start of s and
// the length of its match; n = 0 when none does.
func scanToken(s string) (rule, n int) {
	c := s[0]
	switch {
	case c == '#':
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			return ruleComment, i
		}
		return ruleComment, len(s)
	case c == '"':
		if n := scanString(s); n > 0 {
			return ruleString, n
		}
		return 0, 0 // nothing else starts with a quote
	case isWord(c):
		if n := scanKeyword(s); n > 0 {
			return ruleKeyword, n
		}
	}
	if n := scanIdent(s); n > 0 {
		return ruleIdent, n
	}
	if n := scanFloat(s); n > 0 {
		return ruleFloat, n
	}
	if n := digits(s); n > 0 {
		return ruleInt, n
	}
	if strings.IndexByte("-+*/@(){}[],:=.>", c) >= 0 {
		return rulePunct, 1
	}
	n = 0
	for n < len(s) && isSpace(s[n]) {
		n++
	}
	return ruleWhitespace, n
}

// scanString matches "(\\.|[^"\\\n])*": an escape takes any character
// but a newline. A byte at a time is enough: the bytes of a multi-byte
// character are never a quote, a backslash or a newline.
func scanString(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			return i + 1
		case '\n':
			return 0
		case '\\':
			if i+1 == len(s) || s[i+1] == '\n' {
				return 0
			}
			i++
		}
	}
	return 0
}

var lexKeywords = [...]string{"mesh", "use", "input", "param", "def", "output", "return", "train", "checkpoint", "local", "for"}

// scanKeyword matches a keyword followed by a word boundary.
func scanKeyword(s string) int {
	for _, k := range lexKeywords {
		if strings.HasPrefix(s, k) && (len(s) == len(k) || !isWord(s[len(k)])) {
			return len(k)
		}
	}
	return 0
}

// scanIdent matches 1[fF]1[bB]\b|[A-Za-z_][A-Za-z0-9_]*.
func scanIdent(s string) int {
	if len(s) >= 4 && s[0] == '1' && (s[1] == 'f' || s[1] == 'F') && s[2] == '1' && (s[3] == 'b' || s[3] == 'B') &&
		(len(s) == 4 || !isWord(s[4])) {
		return 4
	}
	if c := s[0]; c != '_' && !isLetter(c) {
		return 0
	}
	n := 1
	for n < len(s) && isWord(s[n]) {
		n++
	}
	return n
}

// scanFloat matches \d+\.\d*E?|\.\d+E?|\d+[eE][-+]?\d+ (E: an optional
// exponent [eE][-+]?\d+), the first alternative that matches winning.
func scanFloat(s string) int {
	d := digits(s)
	switch {
	case d > 0 && d < len(s) && s[d] == '.':
		n := d + 1
		n += digits(s[n:])
		return n + exponent(s[n:])
	case d == 0 && len(s) > 1 && s[0] == '.' && isDigit(s[1]):
		n := 1 + digits(s[1:])
		return n + exponent(s[n:])
	case d > 0:
		if e := exponent(s[d:]); e > 0 {
			return d + e
		}
	}
	return 0 // digits alone are an Int
}

// exponent is the length of [eE][-+]?\d+ at the start of s, or 0.
func exponent(s string) int {
	if len(s) < 2 || s[0] != 'e' && s[0] != 'E' {
		return 0
	}
	n := 1
	if s[1] == '-' || s[1] == '+' {
		n++
	}
	if d := digits(s[n:]); d > 0 {
		return n + d
	}
	return 0
}

func digits(s string) int {
	n := 0
	for n < len(s) && isDigit(s[n]) {
		n++
	}
	return n
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// isWord is regexp's \w, what \b looks at.
func isWord(c byte) bool { return isLetter(c) || isDigit(c) || c == '_' }

// isSpace is regexp's \s: [\t\n\f\r ].
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }
