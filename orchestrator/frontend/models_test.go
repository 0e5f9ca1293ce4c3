package frontend

import (
	"testing"

	"github.com/duet-serve/duet/proto/disagg"
	"github.com/duet-serve/duet/router"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
)

func twoModelServer(t *testing.T) *Server {
	t.Helper()
	b := router.NewPool()
	b.Sync([]router.Member{{ID: "gen-0", URL: "http://g", Role: disagg.RoleGeneration, Healthy: true, Adapters: []string{"sql"}}})
	s := &Server{opts: Options{Models: []Model{{Names: []string{"org/a", "a"}, Pool: router.NewPool()}, {Names: []string{"org/b"}, Pool: b}}}}
	require.NoError(t, s.initModels())
	return s
}

func TestRequestsGoToTheModelTheyName(t *testing.T) {
	s := twoModelServer(t)
	for body, want := range map[string]string{
		`{"model":"org/a"}`:     "org/a",
		`{"model":"a"}`:         "org/a", // an alias
		`{"model":"org/b:sql"}`: "org/b", // SGLang's BASE:ADAPTER
		`{"model":"sql"}`:       "org/b", // a vLLM adapter its workers serve
	} {
		m := s.modelOf([]byte(body))
		require.NotNil(t, m, body)
		require.Equal(t, want, m.Names[0], body)
	}
	for _, body := range []string{`{"model":"c"}`, `{}`, `not json`} {
		require.Nil(t, s.modelOf([]byte(body)), body)
	}
	require.Contains(t, s.unknownModel("c").Message, `model "c" does not exist (served: org/a, a, org/b, sql)`)
}

func TestAdminRequestsNameTheirModel(t *testing.T) {
	s := twoModelServer(t)
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/admin/workers?model=a")
	m, err := s.adminModel(&ctx)
	require.Nil(t, err)
	require.Equal(t, "org/a", m.Names[0])
	ctx.Request.SetRequestURI("/admin/workers")
	_, err = s.adminModel(&ctx)
	require.NotNil(t, err)
	require.Contains(t, err.Message, "several models are served: name one with ?model= (one of org/a, org/b)")
}

func TestModelNamesAreOnesEach(t *testing.T) {
	s := &Server{opts: Options{Models: []Model{{Names: []string{"x"}}, {Names: []string{"y", "x"}}}}}
	require.EqualError(t, s.initModels(), `frontend: model name "x" is served twice`)
	s = &Server{opts: Options{Models: []Model{{Names: []string{"x"}}, {}}}}
	require.EqualError(t, s.initModels(), "frontend: model 2 of 2 has no name")
}
