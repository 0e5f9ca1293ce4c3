package workers

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAssignGPUs(t *testing.T) {
	pools := func(nctx, ctxPer, ngen, genPer int) []pool {
		c := Defaults()
		c.Context.Count, c.Context.GPUsPerWorker = nctx, ctxPer
		c.Generation.Count, c.Generation.GPUsPerWorker = ngen, genPer
		return c.pools()
	}
	cases := []struct {
		name    string
		avail   []string
		source  string
		sharing bool
		pools   []pool
		want    [][][]string
		wantErr string
	}{
		{
			name: "by demand", pools: pools(2, 1, 2, 1),
			want: [][][]string{{{"0"}, {"1"}}, {{"2"}, {"3"}}},
		},
		{
			name: "listed, two per context worker", avail: []string{"4", "5", "6", "7", "8"}, source: "gpus", pools: pools(2, 2, 1, 1),
			want: [][][]string{{{"4", "5"}, {"6", "7"}}, {{"8"}}},
		},
		{
			name: "engine default: sim needs none", pools: pools(2, -1, 2, -1),
			want: [][][]string{{{}, {}}, {{}, {}}},
		},
		{
			name: "uuids from the environment", avail: []string{"GPU-a", "GPU-b"}, source: "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b", pools: pools(1, 1, 1, 1),
			want: [][][]string{{{"GPU-a"}}, {{"GPU-b"}}},
		},
		{
			name: "oversubscribed", avail: []string{"0", "1", "2"}, source: "gpus", pools: pools(2, 1, 2, 1),
			wantErr: "gpus: the workers need 4 GPUs (context 2 x 1, generation 2 x 1) but 3 are available (gpus); set allow_gpu_sharing: true to share GPUs",
		},
		{
			name: "shared round-robin", avail: []string{"0", "1", "2"}, source: "gpus", sharing: true, pools: pools(2, 1, 2, 1),
			want: [][][]string{{{"0"}, {"1"}}, {{"2"}, {"0"}}},
		},
		{
			name: "shared, two per worker, wrapping", avail: []string{"0", "1", "2"}, source: "gpus", sharing: true, pools: pools(1, 2, 1, 2),
			want: [][][]string{{{"0", "1"}}, {{"2", "0"}}},
		},
		{
			name: "more per worker than available, even shared", avail: []string{"0"}, source: "gpus", sharing: true, pools: pools(1, 2, 0, 1),
			wantErr: "context.gpus_per_worker: 2 GPUs per worker but only 1 available (gpus)",
		},
		{
			name: "empty CUDA_VISIBLE_DEVICES", avail: nil, source: "CUDA_VISIBLE_DEVICES=", pools: pools(1, 1, 0, 1),
			wantErr: "context.gpus_per_worker: 1 GPUs per worker but only 0 available (CUDA_VISIBLE_DEVICES=)",
		},
		{
			name: "duplicate in the environment", avail: []string{"0", "0"}, source: "CUDA_VISIBLE_DEVICES=0,0", pools: pools(1, 1, 0, 1),
			wantErr: `gpus: GPU "0" listed twice (CUDA_VISIBLE_DEVICES=0,0)`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := assignGPUs(tc.avail, tc.source, tc.sharing, tc.pools)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestVisibleGPUs(t *testing.T) {
	env := func(v string, ok bool) func(string) (string, bool) {
		return func(k string) (string, bool) {
			require.Equal(t, "CUDA_VISIBLE_DEVICES", k)
			return v, ok
		}
	}
	c := Defaults()
	ids, src := visibleGPUs(c, env("", false))
	require.Nil(t, ids)
	require.Empty(t, src)

	ids, src = visibleGPUs(c, env("2, 3,", true))
	require.Equal(t, []string{"2", "3"}, ids)
	require.Equal(t, "CUDA_VISIBLE_DEVICES=2, 3,", src)

	c.GPUs = []string{"7"}
	ids, src = visibleGPUs(c, env("2", true))
	require.Equal(t, []string{"7"}, ids)
	require.Equal(t, "gpus", src)
}
