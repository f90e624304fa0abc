package lang

import (
	"math"
	"strconv"
)

// Calls on numbers, folded at compile time. A library function computes
// shapes from its arguments' sizes (a mixture-of-experts layer's capacity
// ⌈factor·k·tokens/experts⌉, its groups per device), and a shape must be
// an integer: ceil rounds up to one, integer insists on one with an error
// that says which quantity was not.

// numberArgs evaluates a call's positional arguments, which must be
// numbers, and its optional string last argument.
func (c *Checker) numberArgs(call *Call, usage string, nums int, str bool) ([]float64, string, bool) {
	want := nums
	if str {
		want++
	}
	if len(call.Args) != want {
		c.errorf(call.Pos, "%s takes %s", call.Name, usage)
		return nil, "", false
	}
	var out []float64
	var s string
	for i, a := range call.Args {
		if a.Name != "" {
			c.errorf(a.Pos, "%s takes %s", call.Name, usage)
			return nil, "", false
		}
		op := c.expr(a.Value)
		if op.bad {
			return nil, "", false
		}
		if i == nums {
			if op.str == nil {
				c.errorf(a.Pos, "%s takes %s", call.Name, usage)
				return nil, "", false
			}
			s = *op.str
			continue
		}
		if op.num == nil || math.IsNaN(*op.num) || math.IsInf(*op.num, 0) {
			c.errorf(a.Pos, "%s takes %s: a finite number known at compile time, not a tensor", call.Name, usage)
			return nil, "", false
		}
		out = append(out, *op.num)
	}
	return out, s, true
}

// ceilCall is ceil(n): the smallest integer not below the number n.
func (c *Checker) ceilCall(call *Call) operand {
	n, _, ok := c.numberArgs(call, "one number: ceil(n)", 1, false)
	if !ok {
		return operand{bad: true}
	}
	return numOp(math.Ceil(n[0]))
}

// integerCall is integer(n, "what"): n, which must be an integer; what
// names it in the error.
func (c *Checker) integerCall(call *Call) operand {
	n, what, ok := c.numberArgs(call, `a number and what it is: integer(n, "tokens per group")`, 1, true)
	if !ok {
		return operand{bad: true}
	}
	if n[0] != math.Trunc(n[0]) {
		c.errorf(call.Pos, "%s must be a whole number, not %s", what, strconv.FormatFloat(n[0], 'g', -1, 64))
		return operand{bad: true}
	}
	return numOp(n[0])
}

// numberCall runs the call above of that name; ok is false for any other.
func (c *Checker) numberCall(call *Call) (operand, bool) {
	switch {
	case call.Module != "":
	case call.Name == "ceil":
		return c.ceilCall(call), true
	case call.Name == "integer":
		return c.integerCall(call), true
	}
	return operand{}, false
}

// isNumberCall reports the names numberCall takes.
func isNumberCall(name string) bool { return name == "ceil" || name == "integer" }
