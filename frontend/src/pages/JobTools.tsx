/** The job page's tools: downloads (metrics CSV/JSON, events JSONL) and the spec as YAML with a copy button. */
import { useState } from "react";
import { ErrorBanner } from "../components/ui";
import { download } from "../lib/download";
import { useSpecYaml } from "../lib/queries";

const EXPORTS = [
  ["metrics.csv", "Metrics CSV"],
  ["metrics.json", "Metrics JSON"],
  ["events.jsonl", "Events JSONL"],
] as const;

export function ExportMenu({ jobId }: { jobId: number }) {
  const [error, setError] = useState<unknown>(null);
  return (
    <div className="menu exports" data-testid="exports">
      <span className="muted">Export:</span>
      {EXPORTS.map(([file, label]) => (
        <button key={file} onClick={() => download(`/api/v1/jobs/${jobId}/export/${file}`, `job-${jobId}-${file}`).then(() => setError(null), setError)}>
          ⬇ {label}
        </button>
      ))}
      <ErrorBanner error={error} />
    </div>
  );
}

export function SpecYaml({ jobId }: { jobId: number }) {
  const { data, error } = useSpecYaml(jobId, true);
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    if (!data) return;
    await navigator.clipboard.writeText(data);
    setCopied(true);
    setTimeout(() => setCopied(false), 1500);
  };
  return (
    <div data-testid="spec-yaml">
      <ErrorBanner error={error} />
      <div className="row" style={{ justifyContent: "space-between", marginBottom: 6 }}>
        <span className="muted">save as <code>spec.yaml</code>, then <code>streamrl jobs submit spec.yaml</code></span>
        <span className="menu">
          <button onClick={() => void copy()} disabled={!data}>{copied ? "Copied" : "Copy"}</button>
          <button onClick={() => void download(`/api/v1/jobs/${jobId}/spec.yaml`, `job-${jobId}-spec.yaml`)}>⬇ spec.yaml</button>
        </span>
      </div>
      <pre className="yaml">{data ?? "loading…"}</pre>
    </div>
  );
}
