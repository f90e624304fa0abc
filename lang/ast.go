package lang

import "github.com/alecthomas/participle/v2/lexer"

// The grammar, as participle/v2 tagged structs: each struct is one
// production. spec.md's grammar section is generated from these (see
// Grammar), so the two cannot drift. Newlines are insignificant: every
// statement starts with a keyword or "name =", which ends the expression
// before it. Operator precedence is encoded as levels: Expr (+ -) over
// Term (* / @) over Unary (-) over Postfix-free Primary.

// File is a whole .mesh file.
type File struct {
	Pos   lexer.Position
	Stmts []*Stmt `parser:"@@*"`
}

// Stmt is one statement.
type Stmt struct {
	Pos    lexer.Position
	Mesh   *MeshDecl   `parser:"@@"`
	Use    *UseStmt    `parser:"| @@"`
	Tensor *TensorDecl `parser:"| @@"`
	Def    *FuncDef    `parser:"| @@"`
	Train  *TrainBlock `parser:"| @@"`
	For    *ForStmt    `parser:"| @@"`
	Output *OutputStmt `parser:"| @@"`
	Return *ReturnStmt `parser:"| @@"`
	Assign *Assign     `parser:"| @@"`
	Expr   *Expr       `parser:"| @@"`
}

// MeshDecl: mesh M = [dp=2, tp=4]
type MeshDecl struct {
	Pos  lexer.Position
	Name string     `parser:"\"mesh\" @Ident \"=\""`
	Axes []*AxisDef `parser:"\"[\" @@ (\",\" @@)* \"]\""`
}

// AxisDef: tp=4, or pipeline pp=4 for the axis that carries pipeline stages
type AxisDef struct {
	Pos  lexer.Position
	Pipe bool   `parser:"(@\"pipeline\" (?= Ident))?"`
	Name string `parser:"@Ident \"=\""`
	Size int    `parser:"@Int"`
}

// UseStmt: use nn
type UseStmt struct {
	Pos    lexer.Position
	Module string `parser:"\"use\" @Ident"`
}

// TensorDecl: input x : f32[64, 512] {S(0), B} = load("x.npy")
type TensorDecl struct {
	Pos       lexer.Position
	Kind      string        `parser:"@(\"input\" | \"param\")"`
	Name      string        `parser:"@Ident \":\""`
	Type      *TypeExpr     `parser:"@@"`
	Placement *PlacementLit `parser:"@@?"`
	Init      *Expr         `parser:"(\"=\" @@)?"`
}

// TypeExpr: f32[64, 512]; f32[] is a scalar.
type TypeExpr struct {
	Pos   lexer.Position
	DType string `parser:"@Ident"`
	Dims  []int  `parser:"\"[\" (@Int (\",\" @Int)*)? \"]\""`
}

// PlacementLit: {S(0), B} or {tp: S(1)}.
type PlacementLit struct {
	Pos     lexer.Position
	Entries []*PlacementEntry `parser:"\"{\" (@@ (\",\" @@)*)? \"}\""`
}

// PlacementEntry: S(1), B, P, P(max), or any of them after "axis:".
type PlacementEntry struct {
	Pos  lexer.Position
	Axis string  `parser:"(@Ident \":\")?"`
	Kind string  `parser:"@Ident"`
	Arg  *string `parser:"(\"(\" @(Int | Ident) \")\")?"`
}

// FuncDef: def f(a, b) { ... return e }; "checkpoint def" recomputes the
// function's activations in the backward pass instead of keeping them;
// "local def f(x {r: S(0)}, w {c: S(1)}) -> {r: S(0)} { ... }" is a local
// function: its body sees each device's block and communicates explicitly,
// and its parameters and result declare their global placements;
// "local padded def" accepts splits that do not divide, its blocks padded
// with zeros to the largest, and gives its result's global shape after
// the placement: -> {r: S(0)} [size(x, 0), size(w, 1)].
type FuncDef struct {
	Pos        lexer.Position
	Checkpoint bool          `parser:"@\"checkpoint\"?"`
	Local      bool          `parser:"@\"local\"?"`
	Padded     bool          `parser:"@\"padded\"?"`
	Name       string        `parser:"\"def\" @Ident"`
	Params     []*Param      `parser:"\"(\" (@@ (\",\" @@)*)? \")\""`
	Result     *PlacementLit `parser:"(\"-\" \">\" @@"`
	Shape      []*Expr       `parser:"(\"[\" @@ (\",\" @@)* \"]\")?)?"`
	Body       []*Stmt       `parser:"\"{\" @@* \"}\""`
}

// Param is a function parameter; a local function's may declare the
// placement its argument arrives in.
type Param struct {
	Pos       lexer.Position
	Name      string        `parser:"@Ident"`
	Placement *PlacementLit `parser:"@@?"`
}

// TrainBlock: train { loss = ...  optimizer = adam(lr=0.01)  steps = 20 }
type TrainBlock struct {
	Pos  lexer.Position
	Body []*Stmt `parser:"\"train\" \"{\" @@* \"}\""`
}

// ForStmt: for l in range(4) { ... } repeats its body with l = 0, 1, 2, 3
// (unrolled by the checker: layers written once, repeated).
type ForStmt struct {
	Pos   lexer.Position
	Var   string  `parser:"\"for\" @Ident \"in\" \"range\" \"(\""`
	Count *int    `parser:"( @Int"`
	Name  string  `parser:"| @Ident ) \")\""`
	Body  []*Stmt `parser:"\"{\" @@* \"}\""`
}

// OutputStmt: output y {S(0), B}
type OutputStmt struct {
	Pos       lexer.Position
	Name      string        `parser:"\"output\" @Ident"`
	Placement *PlacementLit `parser:"@@?"`
}

// ReturnStmt: return e
type ReturnStmt struct {
	Pos   lexer.Position
	Value *Expr `parser:"\"return\" @@"`
}

// Assign: name = e
type Assign struct {
	Pos   lexer.Position
	Name  string `parser:"@Ident \"=\""`
	Value *Expr  `parser:"@@"`
}

// Expr is a sum: Term (("+" | "-") Term)*.
type Expr struct {
	Pos  lexer.Position
	Left *Term    `parser:"@@"`
	Ops  []*AddOp `parser:"@@*"`
}

// AddOp is one "+ Term" or "- Term".
type AddOp struct {
	Pos   lexer.Position
	Op    string `parser:"@(\"+\" | \"-\")"`
	Right *Term  `parser:"@@"`
}

// Term is a product: Unary (("*" | "/" | "@") Unary)*.
type Term struct {
	Pos  lexer.Position
	Left *Unary   `parser:"@@"`
	Ops  []*MulOp `parser:"@@*"`
}

// MulOp is one "* Unary", "/ Unary" or "@ Unary".
type MulOp struct {
	Pos   lexer.Position
	Op    string `parser:"@(\"*\" | \"/\" | \"@\")"`
	Right *Unary `parser:"@@"`
}

// Unary is a negation or a primary.
type Unary struct {
	Pos  lexer.Position
	Neg  *Unary   `parser:"\"-\" @@"`
	Prim *Primary `parser:"| @@"`
}

// Primary is a literal, a call, a name, a placement or a parenthesised expression.
type Primary struct {
	Pos       lexer.Position
	Number    *string       `parser:"@(Float | Int)"`
	String    *string       `parser:"| @String"`
	Placement *PlacementLit `parser:"| @@"`
	Call      *Call         `parser:"| @@"`
	Name      *string       `parser:"| @Ident"`
	Paren     *Expr         `parser:"| \"(\" @@ \")\""`
}

// Call: f(a, b, axis=1) or nn.linear(x, W, b)
type Call struct {
	Pos    lexer.Position
	Module string `parser:"(@Ident \".\")?"`
	Name   string `parser:"@Ident \"(\""`
	Args   []*Arg `parser:"(@@ (\",\" @@)*)? \")\""`
}

// Arg is a positional or keyword argument.
type Arg struct {
	Pos   lexer.Position
	Name  string `parser:"(@Ident \"=\")?"`
	Value *Expr  `parser:"@@"`
}
