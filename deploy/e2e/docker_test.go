package main

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseInspect(t *testing.T) {
	st, err := parseInspect(inspectJSON("granary-e2e_granary", "172.18.0.3", 2, "silo-a", "abc"))
	if err != nil {
		t.Fatal(err)
	}
	if ep := st.Networks["granary-e2e_granary"]; ep.IP != "172.18.0.3" || !slices.Equal(ep.Aliases, []string{"silo-a", "abc"}) || st.RestartCount != 2 || !st.Running {
		t.Errorf("parseInspect = %+v", st)
	}
	for _, bad := range []string{"", "{}", "[]", `[{}, {}]`} {
		if _, err := parseInspect(bad); err == nil {
			t.Errorf("parseInspect(%q) succeeded, want an error", bad)
		}
	}
}

func TestParsePort(t *testing.T) {
	tests := []struct{ in, want, wantErr string }{
		{in: "127.0.0.1:30001\n", want: "127.0.0.1:30001"},
		{in: "0.0.0.0:8081\n:::8081\n", want: "127.0.0.1:8081"},
		{in: "[::]:8082\n", want: "127.0.0.1:8082"},
		{in: "10.0.0.5:30003", want: "10.0.0.5:30003"},
		{in: "", wantErr: "not a published host:port"},
		{in: "127.0.0.1:0", wantErr: "not a published host:port"},
	}
	for _, tt := range tests {
		got, err := parsePort(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parsePort(%q) = %q, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parsePort(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestComposeCommands(t *testing.T) {
	r := &fakeRunner{respond: func(cmd string) (string, error) {
		switch {
		case strings.HasSuffix(cmd, "ps -q silo-a"):
			return "abc123\n", nil
		case strings.HasSuffix(cmd, "ps -q silo-b"):
			return "", nil
		case strings.HasSuffix(cmd, "port silo-a 30000"):
			return "127.0.0.1:30001\n", nil
		}
		return "", nil
	}}
	for _, command := range [][]string{{"docker", "compose"}, {"docker-compose"}} {
		c := &compose{r: r, command: command, file: "deploy/compose.yaml", project: "granary-e2e"}
		ctx := context.Background()
		if err := c.up(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.down(ctx, 25*time.Second); err != nil {
			t.Fatal(err)
		}
		if id, err := c.container(ctx, "silo-a"); err != nil || id != "abc123" {
			t.Errorf("container(silo-a) = %q, %v", id, err)
		}
		if _, err := c.container(ctx, "silo-b"); err == nil || !strings.Contains(err.Error(), "service silo-b") {
			t.Errorf("container of a service without one: %v, want an error naming it", err)
		}
		if addr, err := c.port(ctx, "silo-a", 30000); err != nil || addr != "127.0.0.1:30001" {
			t.Errorf("port(silo-a, 30000) = %q, %v", addr, err)
		}
	}
	prefix := func(p string) string { return p + " -f deploy/compose.yaml -p granary-e2e " }
	var want []string
	for _, p := range []string{"docker compose", "docker-compose"} {
		want = append(want,
			prefix(p)+"up -d --no-build",
			prefix(p)+"down -v --remove-orphans -t 25",
			prefix(p)+"ps -q silo-a",
			prefix(p)+"ps -q silo-b",
			prefix(p)+"port silo-a 30000")
	}
	if got := r.commands(); !slices.Equal(got, want) {
		t.Errorf("commands:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestDetectCompose(t *testing.T) {
	tests := []struct {
		name    string
		have    []string // the commands that answer "version"
		want    []string
		wantErr bool
	}{
		{"plugin", []string{"docker compose version", "docker-compose version"}, []string{"docker", "compose"}, false},
		{"standalone", []string{"docker-compose version"}, []string{"docker-compose"}, false},
		{"none", nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fakeRunner{respond: func(cmd string) (string, error) {
				if slices.Contains(tt.have, cmd) {
					return "v2", nil
				}
				return "", errors.New("not found")
			}}
			got, err := detectCompose(context.Background(), r, nil)
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Errorf("detectCompose = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestExecRunner(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	out, err := execRunner{}.run(context.Background(), nil, sh, "-c", "echo out")
	if err != nil || out != "out\n" {
		t.Errorf("run(echo out) = %q, %v", out, err)
	}
	_, err = execRunner{}.run(context.Background(), nil, sh, "-c", "echo broken >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "exit status 3: broken") || !strings.Contains(err.Error(), "-c echo broken") {
		t.Errorf("run of a failing command: %v, want the command, its status and its stderr", err)
	}
}

func TestDockerCommands(t *testing.T) {
	r := &fakeRunner{respond: steadyInspect}
	d := dockerCLI{r: r}
	ctx := context.Background()
	for _, err := range []error{
		d.kill(ctx, "c1"), d.start(ctx, "c1"), d.restart(ctx, "c1", 25*time.Second),
		d.disconnect(ctx, "net", "c1"), d.connect(ctx, "net", "c1", endpoint{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	st, err := d.inspect(ctx, "c1")
	if err != nil || st.Networks["granary-e2e_granary"].IP != "172.18.0.4" {
		t.Errorf("inspect = %+v, %v", st, err)
	}
	want := []string{"docker kill c1", "docker start c1", "docker restart -t 25 c1", "docker network disconnect net c1", "docker network connect net c1", "docker inspect c1"}
	if got := r.commands(); !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
}

func TestDockerConnectAtAddress(t *testing.T) {
	tests := []struct {
		name    string
		refuse  string // the error of connect --ip, if any
		want    []string
		wantErr bool
	}{
		{name: "subnet configured", want: []string{"docker network connect --alias silo-c --ip 10.0.0.7 net c1"}},
		{name: "subnet not configured", refuse: "Error response from daemon: user specified IP address is supported only when connecting to networks with user configured subnets",
			want: []string{"docker network connect --alias silo-c --ip 10.0.0.7 net c1", "docker network connect --alias silo-c net c1"}},
		{name: "address taken", refuse: "Error response from daemon: Address already in use",
			want: []string{"docker network connect --alias silo-c --ip 10.0.0.7 net c1"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fakeRunner{respond: func(cmd string) (string, error) {
				if strings.Contains(cmd, "--ip") && tt.refuse != "" {
					return "", errors.New(tt.refuse)
				}
				return "", nil
			}}
			err := dockerCLI{r: r}.connect(context.Background(), "net", "c1", endpoint{IP: "10.0.0.7", Aliases: []string{"silo-c"}})
			if (err != nil) != tt.wantErr {
				t.Errorf("connect: %v, want error %v", err, tt.wantErr)
			}
			if got := r.commands(); !slices.Equal(got, tt.want) {
				t.Errorf("commands %q, want %q", got, tt.want)
			}
		})
	}
}
