package npy

import (
	"fmt"
	"strconv"
	"strings"
)

// parseDict reads the header's Python dict literal:
//
//	dict  = "{" [ entry { "," entry } [ "," ] ] "}"
//	entry = string ":" value
//	value = string | "True" | "False" | "(" [ int { "," int } [ "," ] ] ")"
//
// with blanks anywhere between tokens and after the dict (the padding).
// Strings are quoted with ' or " and hold no escapes (no descr or key
// needs one); ints are decimal, with the L suffix Python 2 wrote. The keys
// must be descr, fortran_order and shape, each once: NumPy's reader
// evaluates the literal, so of a repeated key it silently keeps the last
// value, and a second reader must not guess differently.
func parseDict(s string) (*Header, error) {
	p := &dictParser{s: s}
	h, err := p.dict()
	if err != nil {
		return nil, fmt.Errorf("malformed .npy header %q: %v", strings.TrimSpace(s), err)
	}
	return h, nil
}

type dictParser struct {
	s string
	i int
}

func (p *dictParser) blanks() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

// next skips blanks and reports whether the input continues with tok,
// consuming it if so.
func (p *dictParser) next(tok string) bool {
	p.blanks()
	if strings.HasPrefix(p.s[p.i:], tok) {
		p.i += len(tok)
		return true
	}
	return false
}

func (p *dictParser) expect(tok string) error {
	if !p.next(tok) {
		return fmt.Errorf("want %q at offset %d", tok, p.i)
	}
	return nil
}

func (p *dictParser) dict() (*Header, error) {
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	h := &Header{}
	seen := map[string]bool{}
	for !p.next("}") {
		key, err := p.str()
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, fmt.Errorf("key '%s' appears twice (NumPy would silently use the last one; meshrun refuses to guess)", key)
		}
		seen[key] = true
		if err := p.expect(":"); err != nil {
			return nil, err
		}
		if err := p.value(key, h); err != nil {
			return nil, err
		}
		if !p.next(",") {
			if err := p.expect("}"); err != nil {
				return nil, err
			}
			break
		}
	}
	p.blanks()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("unexpected %q after the dict", p.s[p.i:])
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return nil, fmt.Errorf("no '%s' key", k)
		}
	}
	return h, nil
}

func (p *dictParser) value(key string, h *Header) error {
	var err error
	switch key {
	case "descr":
		h.Descr, err = p.str()
	case "fortran_order":
		switch {
		case p.next("True"):
			h.Fortran = true
		case p.next("False"):
		default:
			err = fmt.Errorf("fortran_order must be True or False")
		}
	case "shape":
		h.Shape, err = p.tuple()
	default:
		err = fmt.Errorf("unknown key '%s' (want descr, fortran_order and shape)", key)
	}
	return err
}

func (p *dictParser) str() (string, error) {
	p.blanks()
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", fmt.Errorf("want a quoted string at offset %d", p.i)
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", fmt.Errorf("unterminated string at offset %d", p.i)
	}
	v := p.s[p.i+1 : p.i+1+end]
	if strings.ContainsRune(v, '\\') {
		return "", fmt.Errorf("escapes in strings are not supported")
	}
	p.i += end + 2
	return v, nil
}

func (p *dictParser) tuple() ([]int, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	shape := []int{}
	commas := 0
	for !p.next(")") {
		p.blanks()
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(p.s[p.i:j])
		if err != nil {
			return nil, fmt.Errorf("want a dim (a non-negative integer) at offset %d", p.i)
		}
		p.i = j
		p.next("L")
		shape = append(shape, n)
		if !p.next(",") {
			if err := p.expect(")"); err != nil {
				return nil, err
			}
			break
		}
		commas++
	}
	if len(shape) == 1 && commas == 0 {
		// Python reads (3) as the number 3, which NumPy rejects
		return nil, fmt.Errorf("shape (%d) is not a tuple (a one-dim shape is written (%d,))", shape[0], shape[0])
	}
	return shape, nil
}
