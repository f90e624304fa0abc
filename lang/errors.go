package lang

import (
	"fmt"
	"sort"
	"strings"
)

// ErrorList is a sorted list of errors.
type ErrorList []*Error

// MaxErrors is how many errors are reported before "and N more".
const MaxErrors = 10

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i == MaxErrors {
			fmt.Fprintf(&b, "(and %d more errors)\n", len(l)-MaxErrors)
			break
		}
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n")
}

// Sort orders errors by position and drops duplicates.
func (l ErrorList) Sort() ErrorList {
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i].Pos, l[j].Pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	out := l[:0]
	for i, e := range l {
		if i > 0 && e.Pos == l[i-1].Pos && e.Msg == l[i-1].Msg {
			continue
		}
		out = append(out, e)
	}
	return out
}

// Render writes errors the way a compiler does: "file:line:col: message",
// then the source line and a caret under the column. sources maps file
// names to their text; a file not in it is printed without the excerpt.
func Render(err error, sources map[string][]byte) string {
	if err == nil {
		return ""
	}
	var list ErrorList
	switch e := err.(type) {
	case ErrorList:
		list = e
	case *Error:
		list = ErrorList{e}
	default:
		return err.Error()
	}
	var b strings.Builder
	for i, e := range list {
		if i == MaxErrors {
			fmt.Fprintf(&b, "(and %d more errors)\n", len(list)-MaxErrors)
			break
		}
		fmt.Fprintf(&b, "%s\n", e.Error())
		if line, ok := sourceLine(sources[e.Pos.Filename], e.Pos.Line); ok {
			fmt.Fprintf(&b, "    %s\n", strings.ReplaceAll(line, "\t", " "))
			col := e.Pos.Column
			if col < 1 {
				col = 1
			}
			fmt.Fprintf(&b, "    %s^\n", strings.Repeat(" ", col-1))
		}
	}
	return b.String()
}

func sourceLine(src []byte, line int) (string, bool) {
	if src == nil || line < 1 {
		return "", false
	}
	lines := strings.Split(string(src), "\n")
	if line > len(lines) {
		return "", false
	}
	return strings.TrimRight(lines[line-1], "\r"), true
}

// errorf builds an Error.
func errorf(pos Pos, format string, args ...any) *Error {
	return &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

// didYouMean returns ` (did you mean "x"?)` for the closest candidate
// within a small edit distance, or "".
func didYouMean(name string, candidates []string) string {
	limit := max(1, len(name)/3)
	best, bestD := "", limit+1
	for _, c := range candidates {
		if d := editDistance(name, c); d < len(name) && (d < bestD || (d == bestD && c < best)) {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
