/**
 * The same prompt's samples side by side (URL `#/samples?ids=3,7&prompt=...`): pick a prompt the runs answered
 * (those in most runs and iterations first; search the text), then read each run's answers next to each other, or
 * with one run, each iteration's (checkpoints marked). Reached from the compare page and from a sample on a job page.
 */
import { useQuery } from "@tanstack/react-query";
import { useMemo, useState } from "react";
import { Link, useSearchParams } from "react-router";
import { api, unwrap } from "../api/client";
import { Card, ErrorBanner, formatNumber } from "../components/ui";
import { RUN_COLORS } from "../lib/compare";
import { compareRoute, parseIds } from "../lib/runs";
import { sideColumns } from "../lib/sideBySide";

export function SamplesSideBySidePage() {
  const [params, setParams] = useSearchParams();
  const ids = useMemo(() => parseIds(params.get("ids")), [params]);
  const prompt = params.get("prompt");
  const [search, setSearch] = useState("");
  const jobIds = ids.join(",");
  const prompts = useQuery({
    queryKey: ["samples", "prompts", jobIds, search],
    enabled: ids.length > 0,
    queryFn: () => unwrap(api.GET("/api/v1/samples/prompts", { params: { query: { job_ids: jobIds, q: search.trim() || undefined } } })),
    placeholderData: (previous) => previous,
  });
  const side = useQuery({
    queryKey: ["samples", "by-prompt", jobIds, prompt],
    enabled: ids.length > 0 && Boolean(prompt),
    queryFn: () => unwrap(api.GET("/api/v1/samples/by-prompt", { params: { query: { job_ids: jobIds, prompt: prompt ?? "" } } })),
  });
  const choose = (text: string) => {
    const next = new URLSearchParams(params);
    next.set("prompt", text);
    setParams(next, { replace: true });
  };

  if (ids.length === 0) {
    return (
      <div className="not-found">
        <p>Open this view from the compare page or from a sample on a job page.</p>
        <Link to="/jobs">← Runs</Link>
      </div>
    );
  }
  const columns = side.data ? sideColumns(side.data) : [];
  const colorOf = (jobId: number) => RUN_COLORS[Math.max(0, ids.indexOf(jobId)) % RUN_COLORS.length];
  return (
    <div data-testid="side-by-side">
      <div className="page-head">
        <div>
          {ids.length > 1 ? <Link to={compareRoute(ids)} className="muted">← Compare</Link> : <Link to={`/jobs/${ids[0]}`} className="muted">← Job #{ids[0]}</Link>}
          <h2>Same prompt {ids.length > 1 ? `across ${ids.length} runs` : "across iterations"}</h2>
        </div>
      </div>
      <ErrorBanner error={prompts.error ?? side.error} />
      <div className="side-layout">
        <Card title={`Prompts${prompts.data ? ` (${prompts.data.count})` : ""}`} className="prompt-list">
          <input aria-label="search prompts" type="search" placeholder="search prompts" value={search} onChange={(e) => setSearch(e.target.value)} />
          <ul data-testid="prompt-list">
            {(prompts.data?.data ?? []).map((p) => (
              <li key={p.prompt}>
                <button type="button" className={`prompt-item ${p.prompt === prompt ? "active" : ""}`} onClick={() => choose(p.prompt)} title={p.prompt}>
                  <span className="clip">{p.prompt}</span>
                  <span className="muted">{p.runs} run{p.runs === 1 ? "" : "s"} · {p.iterations} iteration{p.iterations === 1 ? "" : "s"} · {p.samples} sample{p.samples === 1 ? "" : "s"}</span>
                </button>
              </li>
            ))}
          </ul>
          {prompts.data && prompts.data.data.length === 0 ? <p className="muted">No stored samples{search ? " match" : " yet"}.</p> : null}
        </Card>
        <div className="side-main">
          {!prompt ? <div className="card muted">Pick a prompt to see its samples side by side.</div> : null}
          {prompt ? <Card title="Prompt"><pre className="prompt-text" data-testid="side-prompt">{prompt}</pre></Card> : null}
          {side.data ? (
            <div className="side-columns" style={{ gridTemplateColumns: `repeat(${Math.max(1, columns.length)}, minmax(260px, 1fr))` }} data-testid="side-columns">
              {columns.map((column) => (
                <section key={column.key} className="side-column" data-testid={`side-column-${column.key}`}>
                  <h3><i style={{ background: colorOf(column.jobId) }} />{column.title}</h3>
                  {column.groups.length === 0 ? <p className="muted">no stored sample of this prompt</p> : null}
                  {column.groups.map((group) => (
                    <div key={group.iteration} className="side-group" data-testid={`side-iteration-${group.iteration}`}>
                      <div className="side-group-head">
                        {ids.length > 1 ? <b>iteration {group.iteration}</b> : null}
                        {group.checkpoint ? <span className="pill">checkpoint</span> : null}
                        <span className="muted">mean reward {formatNumber(group.reward_mean, 3)}</span>
                      </div>
                      {group.samples.map((s) => (
                        <div key={s.sample_id} className="side-sample">
                          <pre className="mono">{s.response}</pre>
                          <div className="muted">
                            {s.reward_error ? <span className="bad" title={s.reward_error}>reward error</span> : `reward ${formatNumber(s.reward, 3)}`}
                            {` · ${s.length} tokens${s.truncated ? ` (cut at ${s.episode ? "max_episode_tokens" : "max_tokens"})` : ""}${typeof s.episode?.turns === "number" ? ` in ${s.episode.turns} turns` : ""} · policy v${s.policy_version}`}
                          </div>
                        </div>
                      ))}
                    </div>
                  ))}
                </section>
              ))}
            </div>
          ) : null}
        </div>
      </div>
    </div>
  );
}
