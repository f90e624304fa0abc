//go:build amd64

package asmgemm

import (
	"os"
	"strings"
	"sync"
)

//go:noescape
func sgemm6x16r(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)

//go:noescape
func sgemm6x16c(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)

//go:noescape
func sgemm12x32c(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)

//go:noescape
func sgemm12x32r(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)

// Kernel is one micro-kernel: it computes an mr×nr tile of C from an A
// panel (k columns of mr values) and a B panel (k rows of nr values).
type Kernel struct {
	Name   string
	mr, nr int
	flags  []string // /proc/cpuinfo flags it needs
	// rows reads A's rows where they lie (row stride lda) instead of a
	// packed panel, and B's rows ldb apart (nr: a packed panel); for
	// inPlace; nil: none
	rows stepKernel
	// cols reads A[i, p] at a[p·lda + i]: a packed panel with lda = mr
	// (the packed path, block), or a transposed A in place; B's rows
	// ldb apart
	cols stepKernel
}

// stepKernel is a micro-kernel that takes its operands' strides.
type stepKernel func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc bool)

var (
	// AVX2 is the 6×16 kernel on YMM registers (AVX2 and FMA).
	AVX2 = &Kernel{"avx2-6x16", 6, 16, []string{"avx2", "fma"}, sgemm6x16r, sgemm6x16c}
	// AVX512 is the 12×32 kernel on ZMM registers (AVX-512F).
	AVX512 = &Kernel{"avx512-12x32", 12, 32, []string{"avx512f"}, sgemm12x32r, sgemm12x32c}
)

// Supported says whether this CPU has the kernel's instructions.
func (k *Kernel) Supported() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, val, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "flags" {
			f := " " + val + " "
			for _, need := range k.flags {
				if !strings.Contains(f, " "+need+" ") {
					return false
				}
			}
			return true
		}
	}
	return false
}

// Block sizes: with the 12×32 kernel a kc-deep A panel (12 KiB) and B
// panel (32 KiB) stay near L1 and mc×kc of A (96 KiB) in L2.
const (
	kcBlock = 256
	mcBlock = 96 // a multiple of both kernels' mr
)

var packs = sync.Pool{New: func() any { return new(pack) }}

type pack struct {
	a, b []float32
	tile [12 * 32]float32
}

// Sgemm is C = A·B, row-major, A m×k (row stride lda), B k×n (ldb), C m×n
// (ldc), with kernel kn (the caller checks kn.Supported()).
func (kn *Kernel) Sgemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	kn.SgemmT(false, false, m, n, k, a, lda, b, ldb, c, ldc)
}

// SgemmT is Sgemm with A stored as its k×m transpose when ta (lda ≥ m)
// and B as its n×k transpose when tb (ldb ≥ k): the packing reads either
// layout into the same panels, so the micro-kernel, and the order of
// every sum, is the same as for the untransposed operands.
func (kn *Kernel) SgemmT(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
		return
	}
	pk := packs.Get().(*pack)
	defer packs.Put(pk)
	if kn.rows != nil && kn.cols != nil && useRows {
		kn.inPlace(pk, ta, tb, m, n, k, a, lda, b, ldb, c, ldc)
		return
	}
	np := (n + kn.nr - 1) / kn.nr
	for p0 := 0; p0 < k; p0 += kcBlock {
		kc := min(kcBlock, k-p0)
		if tb {
			pk.b = packBT(pk.b, b[p0:], ldb, kc, n, kn.nr)
		} else {
			pk.b = packB(pk.b, b[p0*ldb:], ldb, kc, n, kn.nr)
		}
		for i0 := 0; i0 < m; i0 += mcBlock {
			mc := min(mcBlock, m-i0)
			if ta {
				pk.a = packAT(pk.a, a[p0*lda+i0:], lda, mc, kc, kn.mr)
			} else {
				pk.a = packA(pk.a, a[i0*lda+p0:], lda, mc, kc, kn.mr)
			}
			kn.block(pk, pk.b, c[i0*ldc:], ldc, mc, n, kc, np, p0 > 0)
		}
	}
}

// block runs the micro-kernel over an mc×n block of C from packed A
// (mc×kc, pk.a) and B panels bpan (kc×n): the cols kernel with the
// panels' strides (mr, nr); partial tiles at the edges go through
// pk.tile.
func (kn *Kernel) block(pk *pack, bpan, c []float32, ldc, mc, n, kc, np int, acc bool) {
	mr, nr := kn.mr, kn.nr
	for ir := 0; ir < mc; ir += mr {
		ap := pk.a[(ir/mr)*mr*kc:]
		for jp := 0; jp < np; jp++ {
			j0 := jp * nr
			kn.tile(pk, kn.cols, ap, mr, bpan[jp*nr*kc:], nr, c, ldc, ir, j0, min(mr, mc-ir), min(nr, n-j0), kc, acc)
		}
	}
}

// useRows lets inPlace run (tests turn it off to compare with the packed
// path).
var useRows = true

// inPlace is SgemmT on a kernel with rows and cols variants. Packing A
// cost a read and a write of every element, as much as the multiply when
// few B panels share an A panel ([256, 128, 32] ran at 0.40× OpenBLAS so)
// and a fifth of it on wide outputs, so A is read where it lies: its rows
// by the rows kernel, or when stored transposed its columns (mr values in
// a run) by the cols kernel; an mr×kc tile of A (12 KiB on AVX-512) is
// read from L1 or L2 by every B panel. The last rows, fewer than mr, are
// copied into a zero-padded tile (a packed panel when A is transposed). B
// is read in place too when few row tiles share its panels or it is small
// (bInPlaceRows, bInPlaceElems; [64, 512, 512] spent a third of its time
// packing B) and stored untransposed; else packed. Each C element gets the
// same fused multiply-adds in the same order as on the packed path.
func (kn *Kernel) inPlace(pk *pack, ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	mr, nr := kn.mr, kn.nr
	np := (n + nr - 1) / nr
	bIn := !tb && (m <= bInPlaceRows || min(k, kcBlock)*n <= bInPlaceElems)
	full := m - m%mr
	for p0 := 0; p0 < k; p0 += kcBlock {
		kc := min(kcBlock, k-p0)
		switch {
		case tb:
			pk.b = packBT(pk.b, b[p0:], ldb, kc, n, nr)
		case !bIn:
			pk.b = packB(pk.b, b[p0*ldb:], ldb, kc, n, nr)
		case n%nr != 0: // the ragged last panel alone
			pk.b = packB(pk.b, b[p0*ldb+(np-1)*nr:], ldb, kc, n-(np-1)*nr, nr)
		}
		switch { // the last rows, zero-padded to a tile
		case full == m:
		case ta:
			pk.a = packAT(pk.a, a[p0*lda+full:], lda, m-full, kc, mr)
		default:
			pk.a = padRows(pk.a, a[full*lda+p0:], lda, m-full, kc, mr)
		}
		// mcBlock rows at a time (their A, 96 KiB, stays in L2) against
		// one B panel after another (read once from memory per block, and
		// from L1 by every row tile)
		for i0 := 0; i0 < m; i0 += mcBlock {
			for jp := 0; jp < np; jp++ {
				j0 := jp * nr
				cols := min(nr, n-j0)
				bp, lb := pk.b, nr // the ragged panel, packed alone
				switch {
				case !bIn:
					bp = pk.b[jp*nr*kc:]
				case cols == nr:
					bp, lb = b[p0*ldb+j0:(p0+kc-1)*ldb+j0+nr], ldb
				}
				for i := i0; i < min(i0+mcBlock, m); i += mr {
					fn, ap, la := kn.aTile(pk, ta, a, lda, i < full, i, p0, kc)
					kn.tile(pk, fn, ap, la, bp, lb, c, ldc, i, j0, min(mr, m-i), cols, kc, p0 > 0)
				}
			}
		}
	}
}

// aTile is the kernel for the A tile of rows i.. and columns p0.. (kc of
// them) and that tile as it reads it: exactly its elements, and their
// stride: A itself when the tile is full (rows, or cols when A is stored
// transposed), else inPlace's zero-padded copy in pk.a.
func (kn *Kernel) aTile(pk *pack, ta bool, a []float32, lda int, full bool, i, p0, kc int) (stepKernel, []float32, int) {
	mr := kn.mr
	switch {
	case ta && full:
		return kn.cols, a[p0*lda+i : (p0+kc-1)*lda+i+mr], lda
	case ta:
		return kn.cols, pk.a[:mr*kc], mr
	case full:
		return kn.rows, a[i*lda+p0 : (i+mr-1)*lda+p0+kc], lda
	}
	return kn.rows, pk.a[:mr*kc], kc
}

// inPlace reads B in place when C has at most bInPlaceRows rows, or when
// a kc block of B has at most bInPlaceElems elements (64 KiB: it stays in
// L2 whatever its stride). Reading every B in place measured 0.85 -> 0.73
// of OpenBLAS on [256, 1024, 512] and 0.92 -> 0.63 on [256, 512, 1024]
// (a row stride of 4 KiB puts a panel's rows in the same L1 sets), 0.92
// -> 1.10 on [512, 512, 512] and 1.26 -> 1.36 on [256, 32, 128].
const (
	bInPlaceRows  = 96
	bInPlaceElems = 16 << 10
)

// padRows copies rows (< mr) rows of kc columns of A (row stride lda)
// into buf as an mr×kc tile (row stride kc), the rows past them zero.
func padRows(buf, a []float32, lda, rows, kc, mr int) []float32 {
	buf = grow(buf, mr*kc)
	for r := 0; r < rows; r++ {
		copy(buf[r*kc:(r+1)*kc], a[r*lda:r*lda+kc])
	}
	clear(buf[rows*kc:])
	return buf
}

// tile runs kernel fn on C's rows×cols tile at [i, j0] (at most mr×nr)
// from the A tile ap (stride la, as fn reads it) and B panel bp (row
// stride lb); a partial tile goes through pk.tile.
func (kn *Kernel) tile(pk *pack, fn stepKernel, ap []float32, la int, bp []float32, lb int, c []float32, ldc, i, j0, rows, cols, kc int, acc bool) {
	mr, nr := kn.mr, kn.nr
	_ = bp[(kc-1)*lb+nr-1] // every element of B the kernel reads
	if rows == mr && cols == nr {
		cp := c[i*ldc+j0 : (i+mr-1)*ldc+j0+nr]
		fn(kc, &ap[0], la, &bp[0], lb, &cp[0], ldc, acc)
		return
	}
	t := pk.tile[:mr*nr]
	if acc {
		for r := 0; r < rows; r++ {
			copy(t[r*nr:r*nr+cols], c[(i+r)*ldc+j0:])
		}
	}
	fn(kc, &ap[0], la, &bp[0], lb, &t[0], nr, acc)
	for r := 0; r < rows; r++ {
		copy(c[(i+r)*ldc+j0:(i+r)*ldc+j0+cols], t[r*nr:])
	}
}

// packB lays kc rows of B out as panels of kc×nr (zero-padded past n).
func packB(buf, b []float32, ldb, kc, n, nr int) []float32 {
	np := (n + nr - 1) / nr
	buf = grow(buf, np*nr*kc)
	for jp := 0; jp < np; jp++ {
		j0 := jp * nr
		cols := min(nr, n-j0)
		dst := buf[jp*nr*kc:]
		for p := 0; p < kc; p++ {
			row := dst[p*nr : p*nr+nr]
			copy(row, b[p*ldb+j0:p*ldb+j0+cols])
			clear(row[cols:])
		}
	}
	return buf
}

// packA lays mc rows of kc columns of A out as mr-row panels, column by
// column (zero-padded past mc).
func packA(buf, a []float32, lda, mc, kc, mr int) []float32 {
	panels := (mc + mr - 1) / mr
	buf = grow(buf, panels*mr*kc)
	for ip := 0; ip < panels; ip++ {
		dst := buf[ip*mr*kc:]
		for i := 0; i < mr; i++ {
			r := ip*mr + i
			if r >= mc {
				for p := 0; p < kc; p++ {
					dst[p*mr+i] = 0
				}
				continue
			}
			for p, v := range a[r*lda : r*lda+kc] {
				dst[p*mr+i] = v
			}
		}
	}
	return buf
}

// packBT is packB for B stored transposed (row j of the storage is
// column j of B): panel element [p][jj] is b[(j0+jj)·ldb + p].
func packBT(buf, b []float32, ldb, kc, n, nr int) []float32 {
	np := (n + nr - 1) / nr
	buf = grow(buf, np*nr*kc)
	for jp := 0; jp < np; jp++ {
		j0 := jp * nr
		cols := min(nr, n-j0)
		dst := buf[jp*nr*kc : (jp+1)*nr*kc]
		for jj := 0; jj < cols; jj++ {
			for p, v := range b[(j0+jj)*ldb : (j0+jj)*ldb+kc] {
				dst[p*nr+jj] = v
			}
		}
		for p := 0; p < kc; p++ {
			clear(dst[p*nr+cols : p*nr+nr])
		}
	}
	return buf
}

// packAT is packA for A stored transposed (row p of the storage is column
// p of A): a panel's column p is a run of storage row p.
func packAT(buf, a []float32, lda, mc, kc, mr int) []float32 {
	panels := (mc + mr - 1) / mr
	buf = grow(buf, panels*mr*kc)
	for ip := 0; ip < panels; ip++ {
		dst := buf[ip*mr*kc : (ip+1)*mr*kc]
		rows := min(mr, mc-ip*mr)
		for p := 0; p < kc; p++ {
			col := dst[p*mr : p*mr+mr]
			copy(col, a[p*lda+ip*mr:p*lda+ip*mr+rows])
			clear(col[rows:])
		}
	}
	return buf
}

func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}
