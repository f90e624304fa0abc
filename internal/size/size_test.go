package size

import (
	"math"
	"testing"
)

func TestElements(t *testing.T) {
	cases := []struct {
		shape []int
		want  int
		ok    bool
	}{
		{nil, 1, true},
		{[]int{}, 1, true},
		{[]int{3, 4}, 12, true},
		{[]int{1 << 20, 1 << 20}, 1 << 40, true},
		{[]int{1 << 20, 1 << 20, 2}, 0, false},
		// wraps to 0 in int64 arithmetic: 4 * 2^30 * 2^30 * 2^30 = 2^92
		{[]int{4, 1 << 30, 1 << 30, 1 << 30}, 0, false},
		// wraps to a small positive number: (2^32+1) * 2^32 mod 2^64 = 2^32
		{[]int{1<<32 + 1, 1 << 32}, 0, false},
		{[]int{math.MaxInt, math.MaxInt}, 0, false},
		{[]int{1 << 62, 1 << 62, 0}, 0, true},
		{[]int{3, -1}, 0, false},
		{[]int{-2, -3}, 0, false},
	}
	for _, c := range cases {
		got, ok := Elements(c.shape)
		if got != c.want || ok != c.ok {
			t.Errorf("Elements(%v) = %d, %v; want %d, %v", c.shape, got, ok, c.want, c.ok)
		}
	}
}

func TestBytes(t *testing.T) {
	if n, ok := Bytes([]int{2, 3}, 8); n != 48 || !ok {
		t.Errorf("Bytes([2 3], 8) = %d, %v", n, ok)
	}
	if n, ok := Bytes([]int{1 << 20, 1 << 20}, 8); n != 1<<43 || !ok {
		t.Errorf("Bytes([2^20 2^20], 8) = %d, %v", n, ok)
	}
	if _, ok := Bytes([]int{1 << 21, 1 << 20}, 4); ok {
		t.Error("Bytes past MaxElements accepted")
	}
}

func TestMul(t *testing.T) {
	if _, ok := Mul(math.MaxInt/2+1, 2, math.MaxInt); ok {
		t.Error("Mul overflow accepted")
	}
	if n, ok := Mul(math.MaxInt/2, 2, math.MaxInt); !ok || n != math.MaxInt-1 {
		t.Errorf("Mul = %d, %v", n, ok)
	}
	if _, ok := Mul(-1, 2, 100); ok {
		t.Error("Mul of a negative accepted")
	}
}

func TestAddBytesSaturates(t *testing.T) {
	if got := AddBytes(1<<62, 1<<62); got != math.MaxInt64 {
		t.Errorf("AddBytes(2^62, 2^62) = %d", got)
	}
	if got := AddBytes(3, 4); got != 7 {
		t.Errorf("AddBytes(3, 4) = %d", got)
	}
}
