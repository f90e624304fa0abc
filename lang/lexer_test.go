package lang

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/participle/v2/lexer"
	"github.com/meshrun/meshrun/bench/gptsrc"
	"github.com/stretchr/testify/require"
)

// lexAll is every token a lexer makes of src, then its error (nil at EOF).
func lexAll(t testing.TB, d lexer.Definition, src string) ([]lexer.Token, error) {
	l, err := d.(lexer.StringDefinition).LexString("f.mesh", src)
	require.NoError(t, err)
	var toks []lexer.Token
	for {
		tok, err := l.Next()
		if err != nil {
			return toks, err
		}
		toks = append(toks, tok)
		if tok.EOF() {
			return toks, nil
		}
	}
}

// requireSameTokens: scanLexer makes exactly participle's tokens of
// meshRules (types, values, positions) and the same error.
func requireSameTokens(t testing.TB, src string) {
	want, werr := lexAll(t, regexLexer, src)
	got, gerr := lexAll(t, meshLexer, src)
	require.Equal(t, want, got, "tokens of %q", src)
	if werr == nil {
		require.NoError(t, gerr, "%q", src)
		return
	}
	var we, ge *lexer.Error
	require.True(t, errors.As(werr, &we), "%v", werr)
	require.True(t, errors.As(gerr, &ge), "scanLexer: %v, participle: %v (%q)", gerr, werr, src)
	require.Equal(t, *we, *ge, "%q", src)
}

// Every .mesh file of the repository, the generated GPT, edge cases of
// each rule and random text over the characters the rules look at.
func TestScanLexerMatchesTheRules(t *testing.T) {
	var srcs []string
	require.NoError(t, filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".mesh") {
			return err
		}
		b, err := os.ReadFile(path)
		srcs = append(srcs, string(b))
		return err
	}))
	require.Greater(t, len(srcs), 20)
	var gpt bytes.Buffer
	gptsrc.Write(&gpt, 4, true)
	srcs = append(srcs, gpt.String(),
		"", "#", "# c\nx", `"a\"b"`, `"a\`, "\"a\\\nb\"", `"ab`, `"a`+"\n", `"é\é"`, "\"\xff\\\xfe\"",
		"mesh", "meshx", "mesh2", "mesh_", "mesh(", "for", "format", "checkpoint1", "input.x",
		"1f1b", "1F1B", "1f1bx", "1f1b_", "1f1b.", "1f1", "21f1b",
		"1.", "1.5", "1.5e3", "1.5e", "1.5e+", "1.5e-7", "1e5", "1e", "1e+", "1E-2x", ".5", ".5e2", ".", "..", "1..2",
		"12", "007", "a.b", "x>=y", "-+*/@(){}[],:=.>", " \t\r\n\f", "\v", "a\vb", "$", "x $y", "é", "\xff",
		"a b c d e f g h i j k l m n o p q r s t u v ~", "ok\n\n  ~ trailing text longer than sixteen runes")
	for _, src := range srcs {
		requireSameTokens(t, src)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "#\"\\\n\t\r\f\v .eE+-1f0bB9_aZxmesh(){}[],:=>@*/$é~\xff"
	for range 20000 {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		requireSameTokens(t, string(b))
	}
}

func FuzzScanLexer(f *testing.F) {
	for _, s := range []string{"mesh M = [dp=2]", "x = 1.5e-3 * y # c", `"a\"b"`, "1f1b", "$", ".5", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) { requireSameTokens(t, src) })
}
