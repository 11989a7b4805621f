package pdkv

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// handleTypes lists every handle type of the package as a nil pointer. TestHandleTypesListed
// checks the list against the source, so a new handle type cannot be left out of the nil tests.
var handleTypes = []interface{}{
	(*Model)(nil), (*Geometry)(nil), (*TpMapping)(nil), (*MambaReadList)(nil), (*DescriptorList)(nil),
	(*EngineMetadata)(nil), (*GroupTrim)(nil), (*PlanContext)(nil), (*TransferPlan)(nil),
	(*Agent)(nil), (*Memory)(nil), (*Peer)(nil), (*Transfer)(nil), (*Engine)(nil),
}

// handleTypeSet maps the name of each listed handle type to its pointer type.
func handleTypeSet() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for _, h := range handleTypes {
		pt := reflect.TypeOf(h)
		out[pt.Elem().Name()] = pt
	}
	return out
}

// parsedSource parses the package's non-test Go files.
func parsedSource(t *testing.T) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob("*.go")
	must(t, err)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		must(t, err)
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatal("no package source found")
	}
	return files
}

// sourceHandleTypes returns the struct types of the source that own a C object (a field of type
// handle[...]), and the struct types holding a field of a handle type (PlanContextParams).
func sourceHandleTypes(files []*ast.File) (handles, holders map[string]bool) {
	handles, holders = map[string]bool{}, map[string]bool{}
	structs := map[string]*ast.StructType{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			structs[ts.Name.Name] = st
			for _, fld := range st.Fields.List {
				if ix, ok := fld.Type.(*ast.IndexExpr); ok {
					if id, ok := ix.X.(*ast.Ident); ok && id.Name == "handle" {
						handles[ts.Name.Name] = true
					}
				}
			}
			return true
		})
	}
	for name, st := range structs {
		for _, fld := range st.Fields.List {
			if handleRef(fld.Type, handles, nil) {
				holders[name] = true
			}
		}
	}
	return handles, holders
}

// handleRef reports whether the type expression e is a handle pointer (*Model), a slice of them
// ([]*EngineMetadata) or a struct holding them (PlanContextParams, when holders is given).
func handleRef(e ast.Expr, handles, holders map[string]bool) bool {
	switch x := e.(type) {
	case *ast.StarExpr:
		id, ok := x.X.(*ast.Ident)
		return ok && handles[id.Name]
	case *ast.ArrayType:
		return handleRef(x.Elt, handles, holders)
	case *ast.Ellipsis:
		return handleRef(x.Elt, handles, holders)
	case *ast.Ident:
		return holders[x.Name]
	}
	return false
}

// TestHandleTypesListed checks that handleTypes names exactly the source's handle types.
func TestHandleTypesListed(t *testing.T) {
	handles, _ := sourceHandleTypes(parsedSource(t))
	listed := handleTypeSet()
	for name := range handles {
		if _, ok := listed[name]; !ok {
			t.Errorf("handle type %s is missing from handleTypes", name)
		}
	}
	for name := range listed {
		if !handles[name] {
			t.Errorf("handleTypes lists %s, which holds no handle", name)
		}
	}
	if len(handles) < 9 {
		t.Fatalf("found only %d handle types in the source: %v", len(handles), handles)
	}
}

// callNoPanic calls f with args and returns its results, or the panic value.
func callNoPanic(f reflect.Value, args []reflect.Value) (out []reflect.Value, panicked interface{}) {
	defer func() { panicked = recover() }()
	return f.Call(args), nil
}

// nilResult checks the results of a call given a nil handle: no panic, every result but the
// last the zero value, the last an error that is a *Error of StatusNullPointer matching
// ErrNullPointer and not ErrClosed, whose message is wantMsg.
func nilResult(t *testing.T, what string, out []reflect.Value, panicked interface{}, wantMsg string) {
	t.Helper()
	if panicked != nil {
		t.Errorf("%s panicked: %v", what, panicked)
		return
	}
	if len(out) == 0 || out[len(out)-1].Type() != reflect.TypeOf((*error)(nil)).Elem() {
		t.Errorf("%s does not return an error last, so it cannot report a nil handle", what)
		return
	}
	for i, v := range out[:len(out)-1] {
		if !v.IsZero() {
			t.Errorf("%s: result %d is %v, want the zero value next to an error", what, i, v)
		}
	}
	errv := out[len(out)-1].Interface()
	if errv == nil {
		t.Errorf("%s: no error for a nil handle", what)
		return
	}
	err := errv.(error)
	var pe *Error
	if !errors.As(err, &pe) || pe.Status != StatusNullPointer {
		t.Errorf("%s: error %v (%T) is not a *Error of PDKV_ERR_NULL_POINTER", what, err, err)
		return
	}
	if !errors.Is(err, ErrNullPointer) || errors.Is(err, ErrClosed) {
		t.Errorf("%s: %v must match ErrNullPointer and not ErrClosed", what, err)
	}
	if pe.Message != wantMsg {
		t.Errorf("%s: message %q, want %q", what, pe.Message, wantMsg)
	}
	if want := "pdkv: PDKV_ERR_NULL_POINTER: " + wantMsg; err.Error() != want {
		t.Errorf("%s: Error() = %q, want %q", what, err.Error(), want)
	}
}

// TestNilReceiverNeverPanics calls every exported method of every handle type on a nil
// receiver, with zero-value arguments (nil handles included): Close returns nil (also twice),
// every other method returns the "pdkv.<Type> is nil" error, and nothing panics. Methods are
// found by reflection, so new ones are covered without touching this test.
func TestNilReceiverNeverPanics(t *testing.T) {
	total := 0
	for _, h := range handleTypes {
		pt := reflect.TypeOf(h)
		name := pt.Elem().Name()
		if pt.NumMethod() < 2 {
			t.Fatalf("%s has %d exported methods; expected Close and queries", name, pt.NumMethod())
		}
		hasClose := false
		for i := 0; i < pt.NumMethod(); i++ {
			m := pt.Method(i)
			args := []reflect.Value{reflect.Zero(pt)}
			for a := 1; a < m.Type.NumIn(); a++ {
				args = append(args, reflect.Zero(m.Type.In(a)))
			}
			what := fmt.Sprintf("(*%s)(nil).%s", name, m.Name)
			total++
			if m.Name == "Close" {
				hasClose = true
				for round := 0; round < 2; round++ {
					out, p := callNoPanic(m.Func, args)
					if p != nil {
						t.Errorf("%s panicked: %v", what, p)
					} else if len(out) != 1 || !out[0].IsNil() {
						t.Errorf("%s = %v, want nil", what, out)
					}
				}
				continue
			}
			out, p := callNoPanic(m.Func, args)
			nilResult(t, what, out, p, "pdkv."+name+" is nil")
		}
		if !hasClose {
			t.Errorf("%s has no Close method", name)
		}
	}
	if total < 40 {
		t.Fatalf("called only %d methods on nil receivers", total)
	}
}

// nilArgCase is one exported function (or method expression) taking handles. args names, by
// parameter index, the handle parameters as the error message names them; recv marks a method
// expression whose parameter 0 is the receiver; fields names, for a struct parameter, its
// required handle fields as the message names them, and optional its handle fields where nil
// means "not given".
type nilArgCase struct {
	name     string
	fn       interface{}
	recv     bool
	args     map[int]string
	fields   map[string]string
	optional []string
}

// nilArgCases lists every exported function and method taking a handle argument.
// TestNilHandleArgumentsListed checks the list against the source.
var nilArgCases = []nilArgCase{
	{name: "NewGeometry", fn: NewGeometry, args: map[int]string{0: "model"}},
	{name: "EngineMetadataFromModel", fn: EngineMetadataFromModel, args: map[int]string{0: "model"}},
	{name: "NewMambaReads", fn: NewMambaReads, args: map[int]string{0: "p_geometry", 1: "d_geometry"}},
	{name: "AttentionRemoteDescriptors", fn: AttentionRemoteDescriptors, args: map[int]string{2: "mapping"}},
	{name: "AttentionSplitDescriptors", fn: AttentionSplitDescriptors, args: map[int]string{0: "local_attention", 1: "mapping"}},
	{name: "MambaLocalDescriptors", fn: MambaLocalDescriptors, args: map[int]string{2: "geometry"}},
	{name: "MambaRemoteDescriptors", fn: MambaRemoteDescriptors, args: map[int]string{2: "p_geometry", 3: "reads"}},
	{name: "MambaLocalSplitDescriptors", fn: MambaLocalSplitDescriptors, args: map[int]string{2: "d_geometry", 3: "reads"}},
	{name: "EngineMetadata.Equal", fn: (*EngineMetadata).Equal, recv: true, args: map[int]string{1: "other"}},
	{name: "HandshakeValidate", fn: HandshakeValidate, args: map[int]string{0: "local", 1: "remote"}},
	{name: "HandshakeRequireCompatible", fn: HandshakeRequireCompatible, args: map[int]string{0: "local", 1: "remote"}},
	{name: "HandshakeValidateEngineRanks", fn: HandshakeValidateEngineRanks, args: map[int]string{0: "ranks"}},
	{name: "PipelineStagePairs", fn: PipelineStagePairs, args: map[int]string{0: "p_stages", 1: "d_stages"}},
	{name: "NewPlanContext", fn: NewPlanContext,
		fields:   map[string]string{"Local": "params.Local", "Remote": "params.Remote"},
		optional: []string{"LocalGeometry", "RemoteGeometry", "Mapping"}},
	{name: "TransferPlan.Validate", fn: (*TransferPlan).Validate, recv: true, args: map[int]string{1: "ctx"}},
	{name: "NewAgent", fn: NewAgent, fields: map[string]string{"Metadata": "opts.Metadata"}},
	{name: "Agent.Post", fn: (*Agent).Post, recv: true, fields: map[string]string{"Plan": "params.Plan"}},
	{name: "NewEngine", fn: NewEngine, args: map[int]string{0: "model"}},
	{name: "Engine.PlanContext", fn: (*Engine).PlanContext, recv: true, args: map[int]string{1: "remote"}},
	{name: "Engine.PlanRequest", fn: (*Engine).PlanRequest, recv: true, args: map[int]string{1: "ctx"}},
	{name: "Engine.PlanRequestInto", fn: (*Engine).PlanRequestInto, recv: true, args: map[int]string{1: "ctx", 3: "plan"}},
	{name: "PlanContext.CompileInto", fn: (*PlanContext).CompileInto, recv: true, args: map[int]string{2: "plan"}},
	{name: "PlanContext.CompileIntoArgs", fn: (*PlanContext).CompileIntoArgs, recv: true, args: map[int]string{2: "plan"}},
}

// TestNilHandleArgumentsListed checks that nilArgCases lists exactly the exported functions and
// methods of the source with a handle parameter (besides the receiver).
func TestNilHandleArgumentsListed(t *testing.T) {
	files := parsedSource(t)
	handles, holders := sourceHandleTypes(files)
	found := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || !fd.Name.IsExported() {
				continue
			}
			name := fd.Name.Name
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				rt := fd.Recv.List[0].Type
				if s, ok := rt.(*ast.StarExpr); ok {
					rt = s.X
				}
				id, ok := rt.(*ast.Ident)
				if !ok || !id.IsExported() {
					continue
				}
				name = id.Name + "." + name
			}
			for _, p := range fd.Type.Params.List {
				if handleRef(p.Type, handles, holders) {
					found[name] = true
				}
			}
		}
	}
	listed := map[string]bool{}
	for _, c := range nilArgCases {
		listed[c.name] = true
		if !found[c.name] {
			t.Errorf("nilArgCases lists %s, which takes no handle argument", c.name)
		}
	}
	var missing []string
	for name := range found {
		if !listed[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("functions taking handles missing from nilArgCases: %v", missing)
	}
}

// handleFixtures builds one valid (open) handle of each type a nilArgCase may need beside the
// nil one, so the call reaches the nil check of the parameter under test. closeAll closes them;
// the caller skips it after a failure, because a call that panicked may have left a handle
// acquired, and Close would then wait for it forever instead of letting the test report.
func handleFixtures(t *testing.T) (fx map[reflect.Type]reflect.Value, closeAll func()) {
	t.Helper()
	var all []interface{ Close() error }
	closeAll = func() {
		for i := len(all) - 1; i >= 0; i-- {
			_ = all[i].Close()
		}
	}
	keep := func(h interface{ Close() error }, err error) {
		t.Helper()
		if err != nil {
			closeAll()
			t.Fatal(err)
		}
		all = append(all, h)
	}
	m, err := ModelFromPreset("nemotron-3-nano-30b")
	keep(m, err)
	cfg := func(tp uint32) EngineConfig {
		c := DefaultEngineConfig()
		c.TpSize = tp
		return c
	}
	g2, err := NewGeometry(m, cfg(2))
	keep(g2, err)
	g4, err := NewGeometry(m, cfg(4))
	keep(g4, err)
	mp, err := NewTpMapping(TpMappingParams{LocalTpSize: 2, LocalTpRank: 0, RemoteTpSize: 4, TotalKVHeads: 8})
	keep(mp, err)
	reads, err := NewMambaReads(g4, g2, 0, MambaReadsPdkv)
	keep(reads, err)
	dl, err := AttentionLocalDescriptors([]Region{{Base: 1000, BlockLen: 512, NumBlocks: 3}}, 1)
	keep(dl, err)
	metadata := func(tp, rank uint32, id string, base uint64) *EngineMetadata {
		t.Helper()
		l := DefaultEngineLayout()
		l.EngineID, l.TpRank, l.NumRegions, l.Base = id, rank, 6, base
		md, err := EngineMetadataFromModel(m, cfg(tp), l)
		keep(md, err)
		return md
	}
	d := metadata(2, 0, "d", 1<<40)
	var ps []*EngineMetadata
	for r := uint32(0); r < 4; r++ {
		ps = append(ps, metadata(4, r, "p", (2+uint64(r))<<40))
	}
	ctx, err := NewPlanContext(PlanContextParams{Local: d, Remote: ps})
	keep(ctx, err)
	plan, err := ctx.Compile([]PlanGroup{{Trim: GroupTrimInput{Kind: GroupAttention, LocalBlocks: []uint64{10, 12}, RemoteBlocks: []uint64{20, 25, 22}, RemoteComputedTokens: 3000}}})
	keep(plan, err)
	agent, err := NewAgent(AgentOptions{Metadata: d})
	keep(agent, err)
	engine, err := NewEngine(m, cfg(2), DefaultEngineOptions())
	keep(engine, err)
	fx = map[reflect.Type]reflect.Value{}
	for _, v := range []interface{}{m, g2, mp, reads, dl, d, ctx, plan, agent, engine} {
		fx[reflect.TypeOf(v)] = reflect.ValueOf(v)
	}
	return fx, closeAll
}

// isHandlePtr reports whether t is the pointer type of a listed handle type.
func isHandlePtr(t reflect.Type, set map[string]reflect.Type) bool {
	return t.Kind() == reflect.Ptr && set[t.Elem().Name()] == t
}

// fixtureFor returns a valid value of type t: an open handle for a handle pointer, a one-element
// slice of one for a slice of handles, the struct with every handle field filled for a struct
// holding handles, else the zero value.
func fixtureFor(t *testing.T, typ reflect.Type, fx map[reflect.Type]reflect.Value, set map[string]reflect.Type) reflect.Value {
	t.Helper()
	switch {
	case isHandlePtr(typ, set):
		v, ok := fx[typ]
		if !ok {
			t.Fatalf("no fixture for %v", typ)
		}
		return v
	case typ.Kind() == reflect.Slice && isHandlePtr(typ.Elem(), set):
		s := reflect.MakeSlice(typ, 1, 1)
		s.Index(0).Set(fixtureFor(t, typ.Elem(), fx, set))
		return s
	case typ.Kind() == reflect.Struct:
		v := reflect.New(typ).Elem()
		for i := 0; i < typ.NumField(); i++ {
			ft := typ.Field(i).Type
			if isHandlePtr(ft, set) || (ft.Kind() == reflect.Slice && isHandlePtr(ft.Elem(), set)) {
				v.Field(i).Set(fixtureFor(t, ft, fx, set))
			}
		}
		return v
	}
	return reflect.Zero(typ)
}

// withNil returns the value of type typ (a handle pointer, or a slice of them) that holds a nil
// handle, and the suffix the error message puts after the parameter name ("[1]" for a slice,
// whose element 0 is a valid handle).
func withNil(t *testing.T, typ reflect.Type, fx map[reflect.Type]reflect.Value, set map[string]reflect.Type) (reflect.Value, string) {
	t.Helper()
	if typ.Kind() == reflect.Slice {
		s := reflect.MakeSlice(typ, 2, 2)
		s.Index(0).Set(fixtureFor(t, typ.Elem(), fx, set))
		return s, "[1]"
	}
	return reflect.Zero(typ), ""
}

// TestNilHandleArguments passes a nil handle (or a slice holding one, or a struct whose required
// handle field is nil) in each handle parameter of every function and method listed in
// nilArgCases, the other handles valid: the call returns "pdkv.<Type> is nil (<parameter>)"
// without panicking. A nil receiver of a method expression reports "pdkv.<Type> is nil".
// Optional struct fields left nil still succeed or fail for another reason than a nil handle.
func TestNilHandleArguments(t *testing.T) {
	set := handleTypeSet()
	fx, closeAll := handleFixtures(t)
	defer func() {
		if !t.Failed() {
			closeAll()
		}
	}()
	for _, c := range nilArgCases {
		fv := reflect.ValueOf(c.fn)
		ft := fv.Type()
		valid := make([]reflect.Value, ft.NumIn())
		for i := range valid {
			valid[i] = fixtureFor(t, ft.In(i), fx, set)
		}
		tested := 0
		for i := 0; i < ft.NumIn(); i++ {
			pt := ft.In(i)
			args := append([]reflect.Value(nil), valid...)
			switch {
			case c.recv && i == 0:
				args[0] = reflect.Zero(pt)
				out, p := callNoPanic(fv, args)
				nilResult(t, c.name+" on a nil receiver", out, p, "pdkv."+pt.Elem().Name()+" is nil")
				tested++
			case isHandlePtr(pt, set) || (pt.Kind() == reflect.Slice && isHandlePtr(pt.Elem(), set)):
				argName, ok := c.args[i]
				if !ok {
					t.Errorf("%s: handle parameter %d has no name in nilArgCases", c.name, i)
					continue
				}
				v, suffix := withNil(t, pt, fx, set)
				args[i] = v
				elem := pt
				if pt.Kind() == reflect.Slice {
					elem = pt.Elem()
				}
				out, p := callNoPanic(fv, args)
				nilResult(t, fmt.Sprintf("%s with nil %s", c.name, argName), out, p,
					"pdkv."+elem.Elem().Name()+" is nil ("+argName+suffix+")")
				tested++
			case pt.Kind() == reflect.Struct:
				for f := 0; f < pt.NumField(); f++ {
					fld := pt.Field(f)
					if !isHandlePtr(fld.Type, set) && !(fld.Type.Kind() == reflect.Slice && isHandlePtr(fld.Type.Elem(), set)) {
						continue
					}
					isOptional := false
					for _, o := range c.optional {
						isOptional = isOptional || o == fld.Name
					}
					argName, required := c.fields[fld.Name]
					if !required && !isOptional {
						t.Errorf("%s: handle field %s.%s is neither required nor optional in nilArgCases", c.name, pt.Name(), fld.Name)
						continue
					}
					sv := reflect.New(pt).Elem()
					sv.Set(valid[i])
					v, suffix := withNil(t, fld.Type, fx, set)
					sv.Field(f).Set(v)
					args[i] = sv
					out, p := callNoPanic(fv, args)
					what := fmt.Sprintf("%s with nil %s.%s", c.name, pt.Name(), fld.Name)
					if isOptional {
						// nil means "not given": no panic, and no nil-handle error.
						if p != nil {
							t.Errorf("%s panicked: %v", what, p)
						} else if e, _ := out[len(out)-1].Interface().(error); e != nil && strings.Contains(e.Error(), " is nil") {
							t.Errorf("%s: optional field reported as a nil handle: %v", what, e)
						}
						closeResults(out)
						continue
					}
					elem := fld.Type
					if elem.Kind() == reflect.Slice {
						elem = elem.Elem()
					}
					nilResult(t, what, out, p, "pdkv."+elem.Elem().Name()+" is nil ("+argName+suffix+")")
					tested++
				}
			}
		}
		if want := len(c.args) + len(c.fields); c.recv && tested != want+1 || !c.recv && tested != want {
			t.Errorf("%s: tested %d nil handles, nilArgCases names %d", c.name, tested, want)
		}
	}
}

// closeResults closes the handles a successful call returned.
func closeResults(out []reflect.Value) {
	for _, v := range out {
		if c, ok := v.Interface().(interface{ Close() error }); ok && !v.IsNil() {
			_ = c.Close()
		}
	}
}
