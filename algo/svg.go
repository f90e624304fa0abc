package algo

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strings"
)

// The pictures put the three operands where a product is drawn on paper:
// W above Y, X to the left of Y, so a row block of X lines up with the
// row of Y it makes and a column block of W with its column. Every block
// is filled with the colour of its first holder and labelled with all of
// them; hovering shows its ranges and the holders' mesh coordinates.

const (
	svgPlot   = 420.0 // pixels for the longer side of the picture's matrices
	svgMargin = 30.0
	svgTop    = 64.0 // title lines
	svgGap    = 24.0
)

// colour gives device d a hue well apart from its neighbours'.
func colour(d int) string {
	return fmt.Sprintf("hsl(%.0f, 62%%, 72%%)", math.Mod(float64(d)*137.508, 360))
}

// devList writes device numbers with runs joined: 0–3,8.
func devList(ds []int) string {
	var parts []string
	for i := 0; i < len(ds); {
		j := i
		for j+1 < len(ds) && ds[j+1] == ds[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, fmt.Sprint(ds[i]))
		case j == i+1:
			parts = append(parts, fmt.Sprint(ds[i]), fmt.Sprint(ds[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d–%d", ds[i], ds[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// picture is one SVG under construction.
type picture struct {
	g            GEMM
	l            Layout
	b            bytes.Buffer
	s            float64 // pixels per element
	ox, oy       [3]float64
	width, heigh float64
}

func (g GEMM) newPicture(l Layout, title, subtitle string) *picture {
	p := &picture{g: g, l: l}
	p.s = svgPlot / float64(max(g.K+g.N, g.K+g.M))
	left, top := svgMargin+20, svgTop+svgMargin
	kpx := float64(g.K) * p.s
	p.ox = [3]float64{left, left + kpx + svgGap, left + kpx + svgGap}                                               // X, W, Y
	p.oy = [3]float64{top + kpx + svgGap, top, top + kpx + svgGap}                                                  //
	p.width = p.ox[2] + float64(g.N)*p.s + svgMargin                                                                //
	p.heigh = p.oy[2] + float64(g.M)*p.s + svgMargin + 24                                                           //
	p.width = max(p.width, 9*float64(len([]rune(title)))+2*svgMargin, 7*float64(len([]rune(subtitle)))+2*svgMargin) // room for the title
	fmt.Fprintf(&p.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="monospace" font-size="11">`+"\n",
		p.width, p.heigh, p.width, p.heigh)
	p.b.WriteString(`<defs><marker id="head" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#333"/></marker></defs>` + "\n")
	fmt.Fprintf(&p.b, `<rect width="%.0f" height="%.0f" fill="white"/>`+"\n", p.width, p.heigh)
	p.text(svgMargin, 22, 14, title)
	p.text(svgMargin, 42, 11, subtitle)
	return p
}

func (p *picture) text(x, y, size float64, s string) {
	fmt.Fprintf(&p.b, `<text x="%.1f" y="%.1f" font-size="%.0f">`, x, y, size)
	xml.EscapeText(&p.b, []byte(s))
	p.b.WriteString("</text>\n")
}

func operandIndex(o Operand) int {
	switch o {
	case X:
		return 0
	case W:
		return 1
	}
	return 2
}

// rect is block b's pixels in operand o's panel.
func (p *picture) rect(o Operand, r Rect) (x, y, w, h float64) {
	i := operandIndex(o)
	return p.ox[i] + float64(r.C0)*p.s, p.oy[i] + float64(r.R0)*p.s, float64(r.NC) * p.s, float64(r.NR) * p.s
}

// operand draws o's blocks; faded blocks are drawn pale.
func (p *picture) operand(o Operand, faded func(Block) bool) {
	rows, cols := p.g.shape(o)
	m := p.l.Mesh()
	x0, y0, _, _ := p.rect(o, Rect{})
	ly := y0 - 6 // Y's name goes below it, clear of W's arrows
	if o == Y {
		ly = y0 + float64(rows)*p.s + 16
	}
	p.text(x0, ly, 12, fmt.Sprintf("%c [%d×%d]", o, rows, cols))
	for _, b := range p.g.Blocks(p.l, o) {
		x, y, w, h := p.rect(o, b.Rect)
		op := 1.0
		if faded != nil && faded(b) {
			op = 0.25
		}
		fmt.Fprintf(&p.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="%.2f" stroke="#444" stroke-width="0.8"><title>`,
			x, y, w, h, colour(b.Devices[0]), op)
		var coords []string
		for _, d := range b.Devices {
			coords = append(coords, fmt.Sprintf("%d %s", d, m.CoordString(d)))
		}
		xml.EscapeText(&p.b, []byte(fmt.Sprintf("%c[%d:%d, %d:%d] on device %s", o, b.R0, b.R0+b.NR, b.C0, b.C0+b.NC, strings.Join(coords, ", "))))
		p.b.WriteString("</title></rect>\n")
		label := devList(b.Devices)
		if w >= 7*float64(len([]rune(label)))+4 && h >= 13 {
			fmt.Fprintf(&p.b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill-opacity="%.2f">%s</text>`+"\n", x+w/2, y+h/2+4, op, label)
		}
	}
	fmt.Fprintf(&p.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="black" stroke-width="1.5"/>`+"\n",
		x0, y0, float64(cols)*p.s, float64(rows)*p.s)
}

func (p *picture) arrow(x1, y1, x2, y2 float64) {
	fmt.Fprintf(&p.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333" stroke-width="1.5" marker-end="url(#head)"/>`+"\n", x1, y1, x2, y2)
}

func (p *picture) bytes() []byte {
	m := p.l.Mesh()
	last := m.Size() - 1
	p.text(svgMargin, p.heigh-12, 11, fmt.Sprintf("devices are numbered row-major over %s: device %d is %s", m, last, m.CoordString(last)))
	p.b.WriteString("</svg>\n")
	return p.b.Bytes()
}

// SVG draws which block of X, W and Y every device of layout l holds.
func (g GEMM) SVG(l Layout) []byte {
	sub := fmt.Sprintf("Y[%d×%d] = X[%d×%d]·W[%d×%d] on mesh %s; a block is labelled with the devices holding it", g.M, g.N, g.M, g.K, g.K, g.N, l.Mesh())
	p := g.newPicture(l, l.String()+": which device holds which block", sub)
	for _, o := range []Operand{X, W, Y} {
		p.operand(o, nil)
	}
	return p.bytes()
}

// StepSVG draws step t of SUMMA (2D or 2.5D): the blocks X_it that move
// along their row and W_tj that move down their column, the others pale.
func (g GEMM) StepSVG(l Layout, t int) ([]byte, error) {
	if l.Kind != TwoD && l.Kind != TwoHalfD {
		return nil, fmt.Errorf("%s has no SUMMA steps", l)
	}
	if t < 0 || t >= l.Q {
		return nil, fmt.Errorf("%s has steps 0 to %d, not %d", l, l.Q-1, t)
	}
	m := l.Mesh()
	row, col := 0, 1 // the row and col axes of the coordinate
	if l.Kind == TwoHalfD {
		row, col = 1, 2
	}
	on := func(b Block, axis int) bool { return m.Coord(b.Devices[0])[axis] == t }
	title := fmt.Sprintf("%s, step %d of %d", l, t, l.Q)
	sub := fmt.Sprintf("X_i%d is broadcast along row i, W_%dj along column j; every device adds X_i%d·W_%dj to its Y_ij", t, t, t, t)
	p := g.newPicture(l, title, sub)
	// arrows first: they pass under the pale blocks, not over their labels
	for _, b := range g.Blocks(l, X) {
		if on(b, col) && b.NR > 0 {
			x, y, w, h := p.rect(X, b.Rect)
			p.arrow(x+w, y+0.8*h, p.ox[2]-3, y+0.8*h) // along the row, into Y, below the labels
		}
	}
	for _, b := range g.Blocks(l, W) {
		if on(b, row) && b.NC > 0 {
			x, y, w, h := p.rect(W, b.Rect)
			p.arrow(x+0.85*w, y+h, x+0.85*w, p.oy[2]-3) // down the column, into Y, beside the labels
		}
	}
	p.operand(X, func(b Block) bool { return !on(b, col) })
	p.operand(W, func(b Block) bool { return !on(b, row) })
	p.operand(Y, nil)
	return p.bytes(), nil
}
