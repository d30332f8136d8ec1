package data

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ardanlabs/jinja"
)

// The template's tree: statements (tplNode) and expressions (tplExpr).
type (
	tplNode any
	tplExpr any
)

// Statements.
type (
	tplText   struct{ text string }
	tplOutput struct {
		x    tplExpr
		line int
	}
	tplIf struct {
		conds  []tplExpr
		bodies [][]tplNode
		els    []tplNode
		line   int
	}
	tplFor struct {
		targets   []string
		iter      tplExpr
		cond      tplExpr // the loop's filter, or nil
		body, els []tplNode
		recursive bool
		usesLoop  bool // the body names loop (else it is not kept up)
		line      int
	}
	// tplSet assigns x to targets (unpacking a sequence into several), or
	// to attribute attr of namespace ns.
	tplSet struct {
		targets  []string
		ns, attr string
		x        tplExpr
		line     int
	}
	// tplSetBlock assigns what body writes, through filters.
	tplSetBlock struct {
		target, ns, attr string
		filters          []*tplFilter
		body             []tplNode
		line             int
	}
	tplMacro struct {
		name   string
		params []tplParam
		body   []tplNode
		line   int
	}
	tplCallBlock struct {
		params []tplParam
		call   *tplCall
		body   []tplNode
		line   int
	}
	tplFilterBlock struct {
		filters []*tplFilter // each applied to the body's text, in order
		body    []tplNode
		line    int
	}
	tplGroup    struct{ body []tplNode } // {% generation %}: its body as it is
	tplBreak    struct{ line int }
	tplContinue struct{ line int }
)

// tplParam is a macro's or caller's parameter.
type tplParam struct {
	name string
	def  tplExpr // its default, or nil
}

// Expressions.
type (
	tplLit  struct{ v jinja.Value }
	tplName struct{ name string }
	tplAttr struct {
		x    tplExpr
		name string
	}
	tplItem  struct{ x, key tplExpr }
	tplSlice struct{ x, start, stop, step tplExpr } // nil for an omitted part
	tplUnary struct {
		op string // "-", "+", "not"
		x  tplExpr
	}
	tplBin struct {
		op   string // + - * / // % ** and or
		l, r tplExpr
	}
	tplConcat  struct{ parts []tplExpr }
	tplCompare struct {
		first tplExpr
		ops   []string // == != < > <= >= in "not in"
		rest  []tplExpr
	}
	tplCond struct{ cond, yes, no tplExpr } // no may be nil
	tplCall struct {
		fn     tplExpr
		args   []tplExpr
		kwargs []tplKwarg
	}
	tplFilter struct {
		x      tplExpr // nil in a filter block or a set block
		name   string
		args   []tplExpr
		kwargs []tplKwarg
	}
	tplTest struct {
		x    tplExpr
		name string
		args []tplExpr
		neg  bool
	}
	tplList struct {
		items []tplExpr
		tuple bool // written as a tuple: (a, b), a, b or ()
	}
	tplDict struct{ keys, vals []tplExpr }
)

type tplKwarg struct {
	name string
	x    tplExpr
}

// tplParser parses tokens into the tree, as Jinja's parser does, keeping
// how deep blocks and expressions nest (depth) within tplMaxNesting.
type tplParser struct {
	toks  []tplTok
	pos   int
	depth int
	loops int // the for loops around (break and continue need one)
}

func (p *tplParser) peek() tplTok { return p.toks[p.pos] }

func (p *tplParser) next() tplTok {
	t := p.toks[p.pos]
	if t.kind != tkEOF {
		p.pos++
	}
	return t
}

func (p *tplParser) isOp(v string) bool {
	t := p.toks[p.pos]
	return t.kind == tkOp && t.val == v
}

func (p *tplParser) isName(v string) bool {
	t := p.toks[p.pos]
	return t.kind == tkName && t.val == v
}

func (p *tplParser) errf(line int, format string, args ...any) error {
	return &tplError{line: line, msg: fmt.Sprintf(format, args...)}
}

func (p *tplParser) unexpected(want string) error {
	t := p.peek()
	return p.errf(t.line, "unexpected %s, expected %s", t, want)
}

func (p *tplParser) expectOp(v string) error {
	if !p.isOp(v) {
		return p.unexpected(fmt.Sprintf("%q", v))
	}
	p.next()
	return nil
}

func (p *tplParser) expectName() (string, error) {
	if p.peek().kind != tkName {
		return "", p.unexpected("a name")
	}
	return p.next().val, nil
}

func (p *tplParser) expectBlockEnd() error {
	if p.peek().kind != tkBlockEnd {
		return p.unexpected("the end of the tag ('%}')")
	}
	p.next()
	return nil
}

// enter goes one level deeper; leave comes back.
func (p *tplParser) enter() error {
	p.depth++
	if p.depth > tplMaxNesting {
		return p.errf(p.peek().line, "the template nests deeper than %d levels (blocks within blocks and the expressions within them; the limit)", tplMaxNesting)
	}
	return nil
}

func (p *tplParser) leave() { p.depth-- }

func (p *tplParser) parseTemplate() ([]tplNode, error) {
	body, end, err := p.parseBody(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errf(p.peek().line, "unexpected {%% %s %%}", end)
	}
	return body, nil
}

// parseBody parses nodes up to a block tag named by one of ends (its name
// consumed, the rest of the tag not), or the end of the template (end "").
func (p *tplParser) parseBody(ends []string) (nodes []tplNode, end string, err error) {
	for {
		t := p.peek()
		switch t.kind {
		case tkEOF:
			return nodes, "", nil
		case tkText:
			p.next()
			nodes = append(nodes, &tplText{text: t.val})
		case tkVarBegin:
			p.next()
			x, err := p.parseTuple(true)
			if err != nil {
				return nil, "", err
			}
			if p.peek().kind != tkVarEnd {
				return nil, "", p.unexpected("the end of the expression ('}}')")
			}
			p.next()
			nodes = append(nodes, &tplOutput{x: x, line: t.line})
		case tkBlockBegin:
			kw := p.toks[p.pos+1]
			if kw.kind != tkName {
				p.next()
				return nil, "", p.unexpected("a tag's name")
			}
			if slices.Contains(ends, kw.val) || strings.HasPrefix(kw.val, "end") || kw.val == "elif" || kw.val == "else" {
				p.pos += 2
				return nodes, kw.val, nil
			}
			p.pos += 2
			n, err := p.parseStatement(kw.val, kw.line)
			if err != nil {
				return nil, "", err
			}
			nodes = append(nodes, n)
		default:
			return nil, "", p.unexpected("text or a tag")
		}
	}
}

// parseBlock parses the body of a block tag opened at line up to one of
// ends, one level deeper.
func (p *tplParser) parseBlock(tag string, line int, ends ...string) ([]tplNode, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer p.leave()
	body, end, err := p.parseBody(ends)
	if err != nil {
		return nil, "", err
	}
	if !slices.Contains(ends, end) {
		if end == "" {
			return nil, "", p.errf(line, "{%% %s %%} is never closed ({%% %s %%})", tag, ends[len(ends)-1])
		}
		return nil, "", p.errf(p.toks[p.pos-1].line, "unexpected {%% %s %%} in the {%% %s %%} of line %d, expected {%% %s %%}", end, tag, line, strings.Join(ends, " %} or {% "))
	}
	return body, end, nil
}

func (p *tplParser) parseStatement(kw string, line int) (tplNode, error) {
	switch kw {
	case "if":
		return p.parseIf(line)
	case "for":
		return p.parseFor(line)
	case "set":
		return p.parseSet(line)
	case "macro":
		return p.parseMacro(line)
	case "call":
		return p.parseCallBlock(line)
	case "filter":
		filters, err := p.parseFilterChain()
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBlock("filter", line, "endfilter")
		if err != nil {
			return nil, err
		}
		return &tplFilterBlock{filters: filters, body: body, line: line}, p.expectBlockEnd()
	case "break", "continue":
		if p.loops == 0 {
			return nil, p.errf(line, "{%% %s %%} outside a loop", kw)
		}
		if kw == "break" {
			return &tplBreak{line: line}, p.expectBlockEnd()
		}
		return &tplContinue{line: line}, p.expectBlockEnd()
	case "generation":
		// transformers' {% generation %} marks what the model generates;
		// rendered, it is its body.
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBlock("generation", line, "endgeneration")
		if err != nil {
			return nil, err
		}
		return &tplGroup{body: body}, p.expectBlockEnd()
	case "include", "import", "from", "extends", "block":
		return nil, p.errf(line, "unknown tag %q: a chat template has no other templates to load (transformers renders it without a loader)", kw)
	}
	return nil, p.errf(line, "unknown tag %q", tplClip(kw, 40))
}

func (p *tplParser) parseIf(line int) (tplNode, error) {
	n := &tplIf{line: line}
	for {
		cond, err := p.parseTuple(false)
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBlock("if", line, "elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds, n.bodies = append(n.conds, cond), append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			if n.els, _, err = p.parseBlock("if", line, "endif"); err != nil {
				return nil, err
			}
		}
		return n, p.expectBlockEnd()
	}
}

// parseTargets parses the names a for loop or a set assigns: one, or
// several separated by commas (in parentheses or not).
func (p *tplParser) parseTargets() ([]string, error) {
	paren := p.isOp("(")
	if paren {
		p.next()
	}
	var names []string
	for {
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		names = append(names, name)
		if !p.isOp(",") {
			break
		}
		p.next()
		if p.peek().kind != tkName {
			break
		}
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return nil, err
		}
	}
	return names, nil
}

func (p *tplParser) parseFor(line int) (tplNode, error) {
	n := &tplFor{line: line}
	var err error
	if n.targets, err = p.parseTargets(); err != nil {
		return nil, err
	}
	if !p.isName("in") {
		return nil, p.unexpected("'in'")
	}
	p.next()
	if n.iter, err = p.parseTuple(false); err != nil {
		return nil, err
	}
	if p.isName("if") {
		p.next()
		if n.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		p.next()
		n.recursive = true
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	p.loops++
	from := p.pos
	body, end, err := p.parseBlock("for", line, "else", "endfor")
	p.loops--
	if err != nil {
		return nil, err
	}
	n.body = body
	for _, t := range p.toks[from:p.pos] {
		if t.kind == tkName && t.val == "loop" {
			n.usesLoop = true
			break
		}
	}
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		loops := p.loops
		p.loops = 0
		n.els, _, err = p.parseBlock("for", line, "endfor")
		p.loops = loops
		if err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *tplParser) parseSet(line int) (tplNode, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	ns, attr := "", ""
	targets := []string{name}
	switch {
	case p.isOp("."):
		p.next()
		if attr, err = p.expectName(); err != nil {
			return nil, err
		}
		ns = name
	case p.isOp(","):
		p.next()
		more, err := p.parseTargets()
		if err != nil {
			return nil, err
		}
		targets = append(targets, more...)
	}
	if p.isOp("=") {
		p.next()
		x, err := p.parseTuple(true)
		if err != nil {
			return nil, err
		}
		if ns != "" {
			targets = nil
		}
		return &tplSet{targets: targets, ns: ns, attr: attr, x: x, line: line}, p.expectBlockEnd()
	}
	if len(targets) > 1 {
		return nil, p.unexpected("'='")
	}
	n := &tplSetBlock{target: name, ns: ns, attr: attr, line: line}
	if ns != "" {
		n.target = ""
	}
	if p.isOp("|") {
		if n.filters, err = p.parseFilterChain(); err != nil {
			return nil, err
		}
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	loops := p.loops
	p.loops = 0
	n.body, _, err = p.parseBlock("set", line, "endset")
	p.loops = loops
	if err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

// parseParams parses a parameter list in parentheses.
func (p *tplParser) parseParams() ([]tplParam, error) {
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	var params []tplParam
	for !p.isOp(")") {
		if len(params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		prm := tplParam{name: name}
		if p.isOp("=") {
			p.next()
			if prm.def, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
		params = append(params, prm)
	}
	p.next()
	return params, nil
}

// parseEndName skips the name an end tag may repeat ({% endmacro m %}).
func (p *tplParser) parseEndName() {
	if p.peek().kind == tkName {
		p.next()
	}
}

func (p *tplParser) parseMacro(line int) (tplNode, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	params, err := p.parseParams()
	if err != nil {
		return nil, err
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	loops := p.loops
	p.loops = 0
	body, _, err := p.parseBlock("macro", line, "endmacro")
	p.loops = loops
	if err != nil {
		return nil, err
	}
	p.parseEndName()
	return &tplMacro{name: name, params: params, body: body, line: line}, p.expectBlockEnd()
}

func (p *tplParser) parseCallBlock(line int) (tplNode, error) {
	n := &tplCallBlock{line: line}
	var err error
	if p.isOp("(") {
		if n.params, err = p.parseParams(); err != nil {
			return nil, err
		}
	}
	x, err := p.parseExpression(true)
	if err != nil {
		return nil, err
	}
	call, ok := x.(*tplCall)
	if !ok {
		return nil, p.errf(line, "{%% call %%} needs a call (a macro and its arguments)")
	}
	n.call = call
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	loops := p.loops
	p.loops = 0
	n.body, _, err = p.parseBlock("call", line, "endcall")
	p.loops = loops
	if err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

// parseFilterChain parses "name(args) | name(args) ..." (the filters of
// a filter block or a set block; a leading "|" is skipped).
func (p *tplParser) parseFilterChain() ([]*tplFilter, error) {
	var filters []*tplFilter
	for {
		if p.isOp("|") {
			p.next()
		}
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		filters = append(filters, f)
		if !p.isOp("|") {
			return filters, nil
		}
	}
}

// atTupleEnd says whether a tuple's items end here.
func (p *tplParser) atTupleEnd() bool {
	t := p.peek()
	switch t.kind {
	case tkVarEnd, tkBlockEnd, tkEOF:
		return true
	case tkOp:
		return t.val == ")" || t.val == "]" || t.val == "}"
	case tkName:
		return t.val == "if" || t.val == "recursive"
	}
	return false
}

// parseTuple parses an expression, or several separated by commas (a
// tuple, which is a list here).
func (p *tplParser) parseTuple(condexpr bool) (tplExpr, error) {
	var items []tplExpr
	tuple := false
	for {
		if len(items) > 0 {
			if !p.isOp(",") {
				break
			}
			p.next()
			tuple = true
			if p.atTupleEnd() {
				break
			}
		}
		x, err := p.parseExpression(condexpr)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	if !tuple {
		return items[0], nil
	}
	return &tplList{items: items, tuple: true}, nil
}

func (p *tplParser) parseExpression(condexpr bool) (tplExpr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if condexpr {
		return p.parseCondexpr()
	}
	return p.parseOr()
}

// chain counts one more operator of a chain that builds a tree one level
// deeper (a + b + c), to be given back when the chain is done.
func (p *tplParser) chain(n *int) error {
	*n++
	return p.enter()
}

func (p *tplParser) parseCondexpr() (tplExpr, error) {
	n := 0
	defer func() { p.depth -= n }()
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		if err := p.chain(&n); err != nil {
			return nil, err
		}
		p.next()
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var no tplExpr
		if p.isName("else") {
			p.next()
			if no, err = p.parseCondexpr(); err != nil {
				return nil, err
			}
		}
		x = &tplCond{cond: cond, yes: x, no: no}
	}
	return x, nil
}

// parseLeft parses a left-associative chain of binary operators.
func (p *tplParser) parseLeft(operand func() (tplExpr, error), match func() (string, bool)) (tplExpr, error) {
	n := 0
	defer func() { p.depth -= n }()
	x, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		op, ok := match()
		if !ok {
			return x, nil
		}
		if err := p.chain(&n); err != nil {
			return nil, err
		}
		p.next()
		y, err := operand()
		if err != nil {
			return nil, err
		}
		x = &tplBin{op: op, l: x, r: y}
	}
}

func (p *tplParser) opIn(ops ...string) func() (string, bool) {
	return func() (string, bool) {
		t := p.peek()
		if t.kind == tkOp && slices.Contains(ops, t.val) {
			return t.val, true
		}
		return "", false
	}
}

func (p *tplParser) nameIs(name string) func() (string, bool) {
	return func() (string, bool) { return name, p.isName(name) }
}

func (p *tplParser) parseOr() (tplExpr, error) {
	return p.parseLeft(p.parseAnd, p.nameIs("or"))
}

func (p *tplParser) parseAnd() (tplExpr, error) {
	return p.parseLeft(p.parseNot, p.nameIs("and"))
}

func (p *tplParser) parseNot() (tplExpr, error) {
	if p.isName("not") {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		p.next()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &tplUnary{op: "not", x: x}, nil
	}
	return p.parseCompare()
}

func (p *tplParser) parseCompare() (tplExpr, error) {
	n := 0
	defer func() { p.depth -= n }()
	x, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	var c *tplCompare
	for {
		t := p.peek()
		op := ""
		switch {
		case t.kind == tkOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == ">" || t.val == "<=" || t.val == ">="):
			op = t.val
			p.next()
		case t.kind == tkName && t.val == "in":
			op = "in"
			p.next()
		case t.kind == tkName && t.val == "not" && p.toks[p.pos+1].kind == tkName && p.toks[p.pos+1].val == "in":
			op = "not in"
			p.pos += 2
		}
		if op == "" {
			break
		}
		if err := p.chain(&n); err != nil {
			return nil, err
		}
		y, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		if c == nil {
			c = &tplCompare{first: x}
		}
		c.ops, c.rest = append(c.ops, op), append(c.rest, y)
	}
	if c == nil {
		return x, nil
	}
	return c, nil
}

func (p *tplParser) parseMath1() (tplExpr, error) {
	return p.parseLeft(p.parseConcat, p.opIn("+", "-"))
}

func (p *tplParser) parseConcat() (tplExpr, error) {
	n := 0
	defer func() { p.depth -= n }()
	x, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	if !p.isOp("~") {
		return x, nil
	}
	parts := []tplExpr{x}
	for p.isOp("~") {
		if err := p.chain(&n); err != nil {
			return nil, err
		}
		p.next()
		y, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		parts = append(parts, y)
	}
	return &tplConcat{parts: parts}, nil
}

func (p *tplParser) parseMath2() (tplExpr, error) {
	return p.parseLeft(p.parsePow, p.opIn("*", "/", "//", "%"))
}

func (p *tplParser) parsePow() (tplExpr, error) {
	return p.parseLeft(func() (tplExpr, error) { return p.parseUnary(true) }, p.opIn("**"))
}

func (p *tplParser) parseUnary(withFilter bool) (tplExpr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var x tplExpr
	var err error
	if t := p.peek(); t.kind == tkOp && (t.val == "-" || t.val == "+") {
		p.next()
		y, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		x = &tplUnary{op: t.val, x: y}
	} else if x, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	n := 0
	defer func() { p.depth -= n }()
	for {
		switch {
		case p.isOp(".") || p.isOp("["):
			if err := p.chain(&n); err != nil {
				return nil, err
			}
			if x, err = p.parseSubscript(x); err != nil {
				return nil, err
			}
		case p.isOp("("):
			if err := p.chain(&n); err != nil {
				return nil, err
			}
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		case withFilter && p.isOp("|"):
			if err := p.chain(&n); err != nil {
				return nil, err
			}
			p.next()
			if x, err = p.parseFilter(x); err != nil {
				return nil, err
			}
		case withFilter && p.isName("is"):
			if err := p.chain(&n); err != nil {
				return nil, err
			}
			p.next()
			if x, err = p.parseTest(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}

func (p *tplParser) parsePrimary() (tplExpr, error) {
	t := p.peek()
	switch t.kind {
	case tkName:
		p.next()
		switch t.val {
		case "true", "True":
			return &tplLit{v: jinja.NewBool(true)}, nil
		case "false", "False":
			return &tplLit{v: jinja.NewBool(false)}, nil
		case "none", "None":
			return &tplLit{v: jinja.None()}, nil
		}
		return &tplName{name: t.val}, nil
	case tkString:
		s := p.next().val
		if p.peek().kind == tkString {
			var b strings.Builder
			b.WriteString(s)
			for p.peek().kind == tkString {
				b.WriteString(p.next().val)
			}
			s = b.String()
		}
		return &tplLit{v: jinja.NewString(s)}, nil
	case tkInt:
		p.next()
		return &tplLit{v: jinja.NewInt(t.num)}, nil
	case tkFloat:
		p.next()
		return &tplLit{v: jinja.NewFloat(t.fnum)}, nil
	case tkOp:
		switch t.val {
		case "(":
			p.next()
			if p.isOp(")") {
				p.next()
				return &tplList{tuple: true}, nil
			}
			x, err := p.parseTuple(true)
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			p.next()
			l := &tplList{}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				x, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			p.next()
			return l, nil
		case "{":
			p.next()
			d := &tplDict{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys, d.vals = append(d.keys, k), append(d.vals, v)
			}
			p.next()
			return d, nil
		}
	}
	return nil, p.unexpected("an expression")
}

func (p *tplParser) parseSubscript(x tplExpr) (tplExpr, error) {
	if p.next().val == "." {
		t := p.next()
		switch t.kind {
		case tkName:
			return &tplAttr{x: x, name: t.val}, nil
		case tkInt:
			return &tplItem{x: x, key: &tplLit{v: jinja.NewInt(t.num)}}, nil
		}
		p.pos--
		return nil, p.unexpected("an attribute's name")
	}
	var parts [3]tplExpr
	i := 0
	slice := false
	for {
		if p.isOp(":") {
			if i == 2 {
				return nil, p.unexpected("']'")
			}
			p.next()
			slice = true
			i++
			continue
		}
		if p.isOp("]") {
			p.next()
			break
		}
		if parts[i] != nil {
			return nil, p.unexpected("':' or ']'")
		}
		y, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		parts[i] = y
	}
	if !slice {
		if parts[0] == nil {
			return nil, p.errf(p.peek().line, "an empty subscript ([])")
		}
		return &tplItem{x: x, key: parts[0]}, nil
	}
	return &tplSlice{x: x, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

// parseArgs parses a call's arguments in parentheses.
func (p *tplParser) parseArgs() ([]tplExpr, []tplKwarg, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []tplExpr
	var kwargs []tplKwarg
	for !p.isOp(")") {
		if len(args)+len(kwargs) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			return nil, nil, p.errf(p.peek().line, "*args and **kwargs in a call are not supported")
		}
		if t := p.peek(); t.kind == tkName && p.toks[p.pos+1].kind == tkOp && p.toks[p.pos+1].val == "=" {
			p.pos += 2
			x, err := p.parseExpression(true)
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, tplKwarg{name: t.val, x: x})
			continue
		}
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, x)
	}
	p.next()
	return args, kwargs, nil
}

func (p *tplParser) parseCall(fn tplExpr) (tplExpr, error) {
	args, kwargs, err := p.parseArgs()
	if err != nil {
		return nil, err
	}
	return &tplCall{fn: fn, args: args, kwargs: kwargs}, nil
}

// dottedName parses a filter's or test's name (dots allowed).
func (p *tplParser) dottedName() (string, error) {
	name, err := p.expectName()
	if err != nil {
		return "", err
	}
	for p.isOp(".") && p.toks[p.pos+1].kind == tkName {
		name += "." + p.toks[p.pos+1].val
		p.pos += 2
	}
	return name, nil
}

func (p *tplParser) parseFilter(x tplExpr) (*tplFilter, error) {
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	f := &tplFilter{x: x, name: name}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.parseArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *tplParser) parseTest(x tplExpr) (tplExpr, error) {
	neg := false
	if p.isName("not") {
		p.next()
		neg = true
	}
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	t := &tplTest{x: x, name: name, neg: neg}
	switch nt := p.peek(); {
	case p.isOp("("):
		args, kwargs, err := p.parseArgs()
		if err != nil {
			return nil, err
		}
		if len(kwargs) > 0 {
			return nil, p.errf(nt.line, "a test takes no keyword arguments")
		}
		t.args = args
	case nt.kind == tkString || nt.kind == tkInt || nt.kind == tkFloat || p.isOp("[") || p.isOp("{") ||
		nt.kind == tkName && !slices.Contains([]string{"else", "or", "and", "if", "in", "is", "not", "recursive"}, nt.val):
		// One argument without parentheses: x is divisibleby 3.
		y, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		for p.isOp(".") || p.isOp("[") {
			if y, err = p.parseSubscript(y); err != nil {
				return nil, err
			}
		}
		t.args = []tplExpr{y}
	}
	return t, nil
}
