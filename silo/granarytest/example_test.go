package granarytest_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/granaryio/granary/grain"
	hellopb "github.com/granaryio/granary/proto/examples/hello"
	"github.com/granaryio/granary/silo"
	"github.com/granaryio/granary/silo/granarytest"
)

// helloGreeter is the Greeter of examples/hello, with its list of names
// kept as persistent state.
type helloGreeter struct {
	hellopb.UnimplementedGreeterGrain
	greeted *[]string // OnDeactivate appends the grain's key; examples only
}

// greeted is a greeter's persistent state: whom it greeted.
var greeted = grain.NewStateSpec[*hellopb.GreetingsReply]("greeted", "")

func (g *helloGreeter) SayHello(ctx grain.Context, req *hellopb.HelloRequest) (*hellopb.HelloReply, error) {
	st := greeted.Of(ctx)
	st.Value().Names = append(st.Value().Names, req.GetName())
	if err := st.Write(ctx); err != nil {
		return nil, err
	}
	return &hellopb.HelloReply{Message: "Hello, " + req.GetName() + "!", Count: int64(len(st.Value().Names))}, nil
}

func (g *helloGreeter) Greetings(ctx grain.Context, _ *hellopb.GreetingsRequest) (*hellopb.GreetingsReply, error) {
	return &hellopb.GreetingsReply{Names: slices.Clone(greeted.Of(ctx).Value().GetNames())}, nil
}

func (g *helloGreeter) OnDeactivate(ctx grain.Context, reason grain.DeactivationReason) error {
	if g.greeted != nil {
		*g.greeted = append(*g.greeted, fmt.Sprintf("%s (%v)", ctx.ID().Key, reason))
	}
	return nil
}

// registerGreeter registers the Greeter type on each silo: the generated
// RegisterGreeterGrain, with the state declared.
func registerGreeter(r *silo.Silo) error {
	return hellopb.RegisterGreeterGrain(r, func(grain.ID) hellopb.GreeterGrain { return &helloGreeter{} }, grain.WithState(greeted))
}

// A test starts a cluster in one line and calls its grains through it. A
// test uses New(t, ...), which fails the test where Start returns an
// error and stops the cluster when the test ends.
func Example() {
	c, err := granarytest.Start(granarytest.Silos(3), granarytest.Register(registerGreeter))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	ctx := context.Background()
	en := hellopb.NewGreeterRef(c.Caller(), "en")
	for _, name := range []string{"Ada", "Grace"} {
		reply, err := en.SayHello(ctx, &hellopb.HelloRequest{Name: name})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(reply.GetMessage(), reply.GetCount())
	}
	// Called through another silo, the greeter is the same activation.
	list, err := hellopb.NewGreeterRef(c.Silo(2), "en").Greetings(ctx, &hellopb.GreetingsRequest{})
	fmt.Println(list.GetNames(), err)
	fmt.Println("activations:", len(c.Activations(grain.NewID(hellopb.GreeterGrainType, "en"))))
	// Output:
	// Hello, Ada! 1
	// Hello, Grace! 2
	// [Ada Grace] <nil>
	// activations: 1
}

// Kill ends a silo as a crash would: the grains it held activate on
// another silo at their next call, from the state they last wrote to the
// cluster's shared storage.
func ExampleCluster_Kill() {
	c, err := granarytest.Start(granarytest.Silos(2), granarytest.Register(registerGreeter))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	ctx := context.Background()
	fr := hellopb.NewGreeterRef(c.Caller(), "fr")
	if _, err := fr.SayHello(ctx, &hellopb.HelloRequest{Name: "Marie"}); err != nil {
		fmt.Println(err)
		return
	}
	id := grain.NewID(hellopb.GreeterGrainType, "fr")
	was := c.Activations(id)[0]
	c.Kill(was)

	reply, err := fr.SayHello(ctx, &hellopb.HelloRequest{Name: "Pierre"})
	fmt.Println(reply.GetMessage(), reply.GetCount(), err)
	fmt.Println("moved:", c.Activations(id)[0] != was, "silos running:", len(c.Running()))
	// Output:
	// Hello, Pierre! 2 <nil>
	// moved: true silos running: 1
}

// Advance moves the shared fake clock; when it returns, the idle
// collector has deactivated the grains idle past their collection age and
// their OnDeactivate has run.
func ExampleCluster_Advance() {
	var deactivated []string // OnDeactivate runs while Advance waits
	c, err := granarytest.Start(
		granarytest.Configure(func(cfg *silo.Config) { cfg.CollectionAge = 10 * time.Minute }),
		granarytest.Register(func(r *silo.Silo) error {
			return hellopb.RegisterGreeterGrain(r, func(grain.ID) hellopb.GreeterGrain {
				return &helloGreeter{greeted: &deactivated}
			}, grain.WithState(greeted))
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	if _, err := hellopb.NewGreeterRef(c.Caller(), "en").SayHello(context.Background(), &hellopb.HelloRequest{Name: "Alan"}); err != nil {
		fmt.Println(err)
		return
	}
	c.Advance(5 * time.Minute)
	fmt.Println("after 5 minutes:", c.ActivationCount(hellopb.GreeterGrainType), deactivated)
	c.Advance(10 * time.Minute)
	fmt.Println("after 15 minutes:", c.ActivationCount(hellopb.GreeterGrainType), deactivated)
	// Output:
	// after 5 minutes: 1 []
	// after 15 minutes: 0 [en (idle)]
}

// ReadState reads what a grain wrote to the cluster's storage, without a
// call that would activate it again, here after its silo was killed.
func ExampleReadState() {
	c, err := granarytest.Start(granarytest.Silos(2), granarytest.Register(registerGreeter))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	if _, err := hellopb.NewGreeterRef(c.Caller(), "de").SayHello(context.Background(), &hellopb.HelloRequest{Name: "Emmy"}); err != nil {
		fmt.Println(err)
		return
	}
	id := grain.NewID(hellopb.GreeterGrainType, "de")
	c.Kill(c.Activations(id)[0])

	st, ok, err := granarytest.ReadState(c, id, greeted)
	fmt.Println(st.GetNames(), ok, err)
	_, ok, err = granarytest.ReadState(c, grain.NewID(hellopb.GreeterGrainType, "it"), greeted)
	fmt.Println("never written:", ok, err)
	// Output:
	// [Emmy] true <nil>
	// never written: false <nil>
}
