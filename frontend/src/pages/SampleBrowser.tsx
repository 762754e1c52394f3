/** Browse generated samples (iteration, prompt, response, reward, length; turns for multi-turn episodes); filter by
 * iteration, reward, length, policy version, staleness and mismatch; click a row to read it in full with its reward
 * components and reward error (an episode: as the conversation, EpisodeView), its per-token record (TokenTrace: the
 * trajectory explorer, with a diff against another sample of its group), and open its prompt across the run's
 * iterations (side by side). "Latest first" orders by iteration (newest first), whatever order the REST snapshot and
 * SSE merged them in. */
import { useMemo, useState } from "react";
import { Link } from "react-router";
import type { SampleRow } from "../api/types";
import { formatNumber } from "../components/ui";
import { readEpisode } from "../lib/episode";
import { samplesRoute } from "../lib/sideBySide";
import { matches, NO_FILTERS, staleness, type SampleFilters } from "../lib/tokenTrace";
import { EpisodeView } from "./EpisodeView";
import { TokenTrace } from "./TokenTrace";

type SortKey = "latest" | "reward" | "length";

export function SampleBrowser({ samples, jobId }: { samples: SampleRow[]; jobId: number }) {
  const [sort, setSort] = useState<SortKey>("latest");
  const [query, setQuery] = useState("");
  const [open, setOpen] = useState<string | null>(null);
  const [iteration, setIteration] = useState<number | null>(null);
  const [filters, setFilters] = useState<SampleFilters>(NO_FILTERS);
  const numberFilter = (key: "minReward" | "maxReward" | "maxLength" | "version" | "minMismatch", label: string) => (
    <input type="number" step="any" aria-label={label} placeholder={label} className="narrow"
      value={filters[key] ?? ""} onChange={(e) => setFilters({ ...filters, [key]: e.target.value === "" ? null : Number(e.target.value) })} />
  );
  const iterations = useMemo(() => [...new Set(samples.map((s) => s.iteration))].sort((a, b) => b - a), [samples]);
  const rows = useMemo(() => {
    const q = query.toLowerCase();
    const filtered = samples.filter(
      (s) => (iteration === null || s.iteration === iteration) && matches(s, filters)
        && (!q || s.prompt.toLowerCase().includes(q) || s.response.toLowerCase().includes(q)),
    );
    if (sort === "reward") return [...filtered].sort((a, b) => (b.reward ?? -Infinity) - (a.reward ?? -Infinity));
    if (sort === "length") return [...filtered].sort((a, b) => b.length - a.length);
    const position = new Map(samples.map((s, i) => [s.sample_id, i]));
    return [...filtered].sort((a, b) => b.iteration - a.iteration || (position.get(b.sample_id) ?? 0) - (position.get(a.sample_id) ?? 0));
  }, [samples, sort, query, iteration, filters]);
  const openRow = rows.find((s) => s.sample_id === open);
  const openEpisode = useMemo(() => readEpisode(openRow?.episode), [openRow]);
  const episodes = useMemo(() => samples.some((s) => s.episode), [samples]);

  return (
    <div className="samples" data-testid="samples">
      <div className="filters">
        <input placeholder="search prompt or response" value={query} onChange={(e) => setQuery(e.target.value)} />
        <select aria-label="sort samples" value={sort} onChange={(e) => setSort(e.target.value as SortKey)}>
          <option value="latest">latest first</option>
          <option value="reward">highest reward</option>
          <option value="length">longest</option>
        </select>
        <select aria-label="iteration filter" value={iteration ?? ""} onChange={(e) => setIteration(e.target.value === "" ? null : Number(e.target.value))}>
          <option value="">all iterations</option>
          {iterations.map((it) => <option key={it} value={it}>iteration {it}</option>)}
        </select>
        <span className="muted">{samples.length} samples</span>
      </div>
      <div className="filters" data-testid="sample-filters">
        {numberFilter("minReward", "min reward")}
        {numberFilter("maxReward", "max reward")}
        {numberFilter("maxLength", "max length")}
        {numberFilter("version", "policy version")}
        <select aria-label="staleness filter" value={filters.staleness} onChange={(e) => setFilters({ ...filters, staleness: e.target.value as SampleFilters["staleness"] })}>
          <option value="any">any staleness</option>
          <option value="on-policy">on-policy only</option>
          <option value="stale">stale only</option>
        </select>
        {numberFilter("minMismatch", "min mismatch")}
        <span className="muted" data-testid="filtered-count">{rows.length} shown</span>
      </div>
      <table className="table compact">
        <thead>
          <tr>
            <th>Iter</th>
            <th>Prompt</th>
            <th>Response</th>
            <th>Reward</th>
            <th>Length</th>
            {episodes ? <th>Turns</th> : null}
            <th>Policy v</th>
            <th>Stale</th>
            <th>Mismatch</th>
            <th>Instance</th>
          </tr>
        </thead>
        <tbody>
          {rows.slice(0, 100).map((s) => (
            <tr key={s.sample_id} className={open === s.sample_id ? "open" : ""} onClick={() => setOpen(open === s.sample_id ? null : s.sample_id)}>
              <td>{s.iteration}</td>
              <td className="clip">{s.prompt}</td>
              <td className="clip mono">{s.response}</td>
              <td title={s.reward_error ?? undefined} className={s.reward_error ? "bad" : undefined}>
                {s.reward_error ? "error" : formatNumber(s.reward, 3)}
              </td>
              <td>{s.length}</td>
              {episodes ? <td>{typeof s.episode?.turns === "number" ? s.episode.turns : "–"}</td> : null}
              <td>{s.policy_version}</td>
              <td>{staleness(s)}</td>
              <td>{s.mismatch === null || s.mismatch === undefined ? "–" : s.mismatch.toExponential(1)}</td>
              <td>{s.instance_id}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {openRow && (
        <div className="sample-detail" data-testid="sample-detail">
          <Link to={samplesRoute([jobId], openRow.prompt)}>This prompt across iterations and checkpoints →</Link>
          {openRow.reward_error && <p className="error">reward error: {openRow.reward_error}</p>}
          {openEpisode ? <EpisodeView episode={openEpisode} /> : null}
          <TokenTrace key={openRow.sample_id} jobId={jobId} sample={openRow} samples={samples} />
          {openRow.reward_components && (
            <table className="table compact">
              <thead><tr><th>Reward component</th><th>Value</th></tr></thead>
              <tbody>
                {Object.entries(openRow.reward_components).map(([name, value]) => (
                  <tr key={name}><td>{name}</td><td>{formatNumber(value, 3)}</td></tr>
                ))}
              </tbody>
            </table>
          )}
        </div>
      )}
    </div>
  );
}
