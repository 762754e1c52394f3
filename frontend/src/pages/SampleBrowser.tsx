/** Browse generated samples (prompt, response, reward, length); click a row to read it in full. */
import { useMemo, useState } from "react";
import type { SampleRow } from "../api/types";
import { formatNumber } from "../components/ui";

type SortKey = "latest" | "reward" | "length";

export function SampleBrowser({ samples }: { samples: SampleRow[] }) {
  const [sort, setSort] = useState<SortKey>("latest");
  const [query, setQuery] = useState("");
  const [open, setOpen] = useState<string | null>(null);
  const rows = useMemo(() => {
    const q = query.toLowerCase();
    const filtered = samples.filter((s) => !q || s.prompt.toLowerCase().includes(q) || s.response.toLowerCase().includes(q));
    if (sort === "reward") return [...filtered].sort((a, b) => (b.reward ?? -Infinity) - (a.reward ?? -Infinity));
    if (sort === "length") return [...filtered].sort((a, b) => b.length - a.length);
    return [...filtered].reverse();
  }, [samples, sort, query]);

  return (
    <div className="samples" data-testid="samples">
      <div className="filters">
        <input placeholder="search prompt or response" value={query} onChange={(e) => setQuery(e.target.value)} />
        <select aria-label="sort samples" value={sort} onChange={(e) => setSort(e.target.value as SortKey)}>
          <option value="latest">latest first</option>
          <option value="reward">highest reward</option>
          <option value="length">longest</option>
        </select>
        <span className="muted">{samples.length} samples</span>
      </div>
      <table className="table compact">
        <thead>
          <tr>
            <th>Prompt</th>
            <th>Response</th>
            <th>Reward</th>
            <th>Length</th>
            <th>Policy v</th>
            <th>Instance</th>
          </tr>
        </thead>
        <tbody>
          {rows.slice(0, 100).map((s) => (
            <tr key={s.sample_id} className={open === s.sample_id ? "open" : ""} onClick={() => setOpen(open === s.sample_id ? null : s.sample_id)}>
              <td className="clip">{s.prompt}</td>
              <td className="clip mono">{s.response}</td>
              <td>{formatNumber(s.reward, 3)}</td>
              <td>{s.length}</td>
              <td>{s.policy_version}</td>
              <td>{s.instance_id}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
