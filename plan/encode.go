package plan

import (
	"bufio"
	"bytes"
	"encoding/gob"
	"fmt"
	"io"
)

// The encoded form is a magic line naming the format's version, then the
// plan in encoding/gob (self-describing, so a reader can say what it
// could not decode). A plan carries its own positions and labels: a rank
// that decodes one needs nothing else from the compiler to run it and to
// report a fault at its source line.
const magic = "meshrun-plan v1\n"

// Encode writes p to w.
func Encode(w io.Writer, p *Plan) error {
	if _, err := io.WriteString(w, magic); err != nil {
		return err
	}
	return gob.NewEncoder(w).Encode(p)
}

// Decode reads a plan Encode wrote and checks that it is well formed.
func Decode(r io.Reader) (*Plan, error) {
	br := bufio.NewReader(r)
	head, err := br.ReadString('\n')
	if err != nil || head != magic {
		return nil, fmt.Errorf("not a meshrun plan (want the header %q)", magic[:len(magic)-1])
	}
	p := &Plan{}
	if err := gob.NewDecoder(br).Decode(p); err != nil {
		return nil, fmt.Errorf("decoding plan: %v", err)
	}
	if err := p.WellFormed(); err != nil {
		return nil, fmt.Errorf("decoded plan: %v", err)
	}
	return p, nil
}

// Marshal is Encode to a byte slice.
func Marshal(p *Plan) ([]byte, error) {
	var b bytes.Buffer
	err := Encode(&b, p)
	return b.Bytes(), err
}
