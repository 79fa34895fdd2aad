package main

import (
	"fmt"

	"google.golang.org/protobuf/compiler/protogen"
)

// The Go names that the generated code of a grain type or an observer
// service declares. Every name is derived from the service's Go name (the
// CamelCase of its proto name) and, for handlers, the rpc's Go name. An
// observer service X has no grain, so its interface is X itself, its stub
// UnimplementedX, its type constant XObserverType and its handlers
// _X_M_Observer; it has CreateX in place of NewXRef and RegisterXGrain.

func (t *grainType) typeConstName() string {
	if t.observer {
		return t.svc.GoName + "ObserverType"
	}
	return t.svc.GoName + "GrainType"
}

func (t *grainType) ifaceName() string {
	if t.observer {
		return t.svc.GoName
	}
	return t.svc.GoName + "Grain"
}

func (t *grainType) unimplName() string { return "Unimplemented" + t.ifaceName() }

func (t *grainType) refName() string       { return t.svc.GoName + "Ref" }
func (t *grainType) newRefName() string    { return "New" + t.svc.GoName + "Ref" }
func (t *grainType) refFromIDName() string { return t.svc.GoName + "RefFromID" }
func (t *grainType) descName() string      { return t.svc.GoName + "_ServiceDesc" }
func (t *grainType) registerName() string  { return "Register" + t.svc.GoName + "Grain" }
func (t *grainType) createName() string    { return "Create" + t.svc.GoName }

func (t *grainType) handlerName(m *grainMethod) string {
	if t.observer {
		return "_" + t.svc.GoName + "_" + m.m.GoName + "_Observer"
	}
	return "_" + t.svc.GoName + "_" + m.m.GoName + "_Handler"
}

func (m *grainMethod) asyncName() string { return m.m.GoName + "Async" }

// packageDecls lists the package-level names that the generated code of t
// declares.
func (t *grainType) packageDecls() []string {
	names := []string{t.typeConstName(), t.ifaceName(), t.unimplName(), t.refName(), t.refFromIDName(), t.descName()}
	if t.observer {
		names = append(names, t.createName())
	} else {
		names = append(names, t.newRefName(), t.registerName())
	}
	for _, m := range t.methods {
		names = append(names, t.handlerName(m))
	}
	return names
}

// refIDMethod is the method every XRef has besides its rpc methods.
const refIDMethod = "ID"

// hookMethods are the method names of the grain package's lifecycle hook
// interfaces (grain.Activator, grain.Deactivator). A grain implementation
// cannot have an rpc method of one of these names and also implement the
// hook, so such an rpc is refused. An observer has no activation and no
// hooks, so its rpcs may take these names.
var hookMethods = map[string]string{
	"OnActivate":   "grain.Activator",
	"OnDeactivate": "grain.Deactivator",
}

// checkNames reports every generated name that would collide with another
// declaration: a package-level name generated for another service, or
// declared by protoc-gen-go for a message, enum or extension of the same Go
// package; a method of XRef generated twice (rpcs Get and GetAsync both make
// XRef.GetAsync; rpcs foo_bar and FooBar both make FooBar; an rpc ID hides
// XRef.ID); and an rpc of a grain type whose name is a lifecycle hook's.
func checkNames(gen *protogen.Plugin, types []*grainType) []error {
	var errs []error

	// Package-level names, per Go package.
	owners := make(map[protogen.GoImportPath]map[string]string)
	for _, t := range types {
		pkg := t.file.GoImportPath
		if owners[pkg] == nil {
			owners[pkg] = protoDecls(gen, pkg)
		}
		declared := owners[pkg]
		owner := fmt.Sprintf("the same name generated for service %s (%s)", t.svc.Desc.FullName(), t.file.Desc.Path())
		for _, name := range t.packageDecls() {
			if prev, ok := declared[name]; ok {
				errs = append(errs, fmt.Errorf("%s: service %s: generated name %s collides with %s", t.file.Desc.Path(), t.svc.Desc.FullName(), name, prev))
				continue
			}
			declared[name] = owner
		}
	}

	// Methods of each XRef (the interface's and the stub's method names are
	// a subset), and hook names.
	for _, t := range types {
		methods := map[string]string{refIDMethod: fmt.Sprintf("the method %s.%s", t.refName(), refIDMethod)}
		for _, m := range t.methods {
			fail := func(format string, args ...any) {
				errs = append(errs, fmt.Errorf("%s: service %s: rpc %s: %s", t.file.Desc.Path(), t.svc.Desc.FullName(), m.m.Desc.Name(), fmt.Sprintf(format, args...)))
			}
			if hook, ok := hookMethods[m.m.GoName]; ok && !t.observer {
				fail("the Go method name %s is taken by the lifecycle hook %s", m.m.GoName, hook)
			}
			for _, name := range []string{m.m.GoName, m.asyncName()} {
				if prev, ok := methods[name]; ok {
					fail("generated method %s.%s collides with %s", t.refName(), name, prev)
					continue
				}
				methods[name] = fmt.Sprintf("the method generated for rpc %s", m.m.Desc.Name())
			}
		}
	}
	return errs
}

// protoDecls returns the package-level names that protoc-gen-go declares
// for the files of gen that belong to the Go package pkg, each mapped to a
// description of its owner. Files that are only dependencies count too:
// they share the package.
func protoDecls(gen *protogen.Plugin, pkg protogen.GoImportPath) map[string]string {
	decls := make(map[string]string)
	add := func(name, owner string) {
		if _, ok := decls[name]; !ok {
			decls[name] = owner
		}
	}
	addEnums := func(es []*protogen.Enum, path string) {
		for _, e := range es {
			owner := fmt.Sprintf("enum %s (%s)", e.Desc.FullName(), path)
			add(e.GoIdent.GoName, owner)
			add(e.GoIdent.GoName+"_name", owner)
			add(e.GoIdent.GoName+"_value", owner)
			for _, v := range e.Values {
				add(v.GoIdent.GoName, fmt.Sprintf("enum value %s (%s)", v.Desc.FullName(), path))
			}
		}
	}
	addExtensions := func(xs []*protogen.Extension, path string) {
		for _, x := range xs {
			add("E_"+x.GoIdent.GoName, fmt.Sprintf("extension %s (%s)", x.Desc.FullName(), path))
		}
	}
	var addMessages func(ms []*protogen.Message, path string)
	addMessages = func(ms []*protogen.Message, path string) {
		for _, m := range ms {
			if m.Desc.IsMapEntry() {
				continue
			}
			add(m.GoIdent.GoName, fmt.Sprintf("message %s (%s)", m.Desc.FullName(), path))
			for _, o := range m.Oneofs {
				if o.Desc.IsSynthetic() {
					continue
				}
				for _, f := range o.Fields {
					add(f.GoIdent.GoName, fmt.Sprintf("oneof field %s (%s)", f.Desc.FullName(), path))
				}
			}
			addEnums(m.Enums, path)
			addExtensions(m.Extensions, path)
			addMessages(m.Messages, path)
		}
	}
	for _, f := range gen.Files {
		if f.GoImportPath != pkg {
			continue
		}
		path := f.Desc.Path()
		add(f.GoDescriptorIdent.GoName, fmt.Sprintf("the file descriptor of %s", path))
		addEnums(f.Enums, path)
		addExtensions(f.Extensions, path)
		addMessages(f.Messages, path)
	}
	return decls
}
