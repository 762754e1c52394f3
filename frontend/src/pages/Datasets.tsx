/**
 * Datasets page (`#/datasets`, in the navigation): the team's datasets with their stats (rows, size, source, state),
 * uploading a JSONL / Parquet / CSV file with its progress (a name already taken in the team is refused, 409), and
 * the preview of a dataset through a model's chat template with its prompt-length histogram (DatasetPreviewCard).
 */
import { useState } from "react";
import { api, unwrap } from "../api/client";
import type { Dataset } from "../api/types";
import { Card, ErrorBanner, formatTime } from "../components/ui";
import { queryClient, useApiQuery } from "../lib/queries";
import { progressText, uploadWithProgress, type UploadProgress } from "../lib/upload";
import { useSession } from "../session";
import { DatasetPreviewCard } from "./DatasetPreviewCard";

const kilobytes = (bytes: number) => `${(bytes / 1e3).toFixed(1)} kB`;

function DatasetsTable() {
  const datasets = useApiQuery(["datasets"], () => unwrap(api.GET("/api/v1/datasets")));
  return (
    <Card title="Datasets" className="wide">
      <ErrorBanner error={datasets.error} />
      <div style={{ overflowX: "auto" }}>
        <table className="table compact" data-testid="datasets">
          <thead>
            <tr><th>Name</th><th>State</th><th>Rows</th><th>Size</th><th>Source</th><th>Checksum</th><th>Created</th></tr>
          </thead>
          <tbody>
            {datasets.data?.data.length === 0 ? <tr><td colSpan={7} className="muted">no dataset yet: upload one below</td></tr> : null}
            {datasets.data?.data.map((d) => (
              <tr key={d.id} data-testid={`dataset-${d.name}`}>
                <td>{d.name}</td>
                <td>{d.state}{d.error ? <span className="warn"> {d.error}</span> : null}</td>
                <td>{d.row_count}</td>
                <td>{kilobytes(d.size_bytes)}</td>
                <td>{d.source === "hub" ? <code>{d.hub_id}@{d.revision} ({d.split})</code> : "upload"}</td>
                <td><code title={d.checksum}>{d.checksum.slice(0, 12)}</code></td>
                <td>{formatTime(d.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </Card>
  );
}

function DatasetUploadCard() {
  const [file, setFile] = useState<File | null>(null);
  const [name, setName] = useState("");
  const [progress, setProgress] = useState<UploadProgress | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const busy = progress !== null && done === null && error === null;

  const upload = async () => {
    if (!file) return;
    const form = new FormData();
    form.append("file", file);
    form.append("name", name || file.name.replace(/\.(jsonl?|parquet|csv)$/, ""));
    setError(null);
    setDone(null);
    setProgress({ sent: 0, total: file.size });
    try {
      const dataset = await uploadWithProgress<Dataset>("/api/v1/datasets", form, setProgress);
      setDone(`uploaded ${dataset.name}: ${dataset.row_count} rows`);
      await queryClient.invalidateQueries({ queryKey: ["datasets"] });
    } catch (err) {
      setError(err);
    }
  };

  return (
    <Card title="Upload a dataset">
      <p className="muted">
        JSONL, Parquet or CSV rows with a <code>prompt</code> (text or chat messages) or OpenAI <code>messages</code>;
        other columns reach the reward. A bad row is named and nothing is stored.
      </p>
      <ErrorBanner error={error} />
      <div className="row inline-form">
        <input name="dataset_upload_file" type="file" accept=".jsonl,.json,.parquet,.csv" onChange={(e) => setFile(e.target.files?.[0] ?? null)} />
        <input name="dataset_upload_name" placeholder="dataset name (default: file name)" value={name} onChange={(e) => setName(e.target.value)} />
        <button type="button" onClick={() => void upload()} disabled={!file || busy}>{busy ? "Uploading…" : "Upload dataset"}</button>
      </div>
      {progress ? (
        <div data-testid="dataset-upload-progress">
          <progress max={progress.total || 1} value={progress.sent} /> <span className="muted">{progressText(progress)}</span>
        </div>
      ) : null}
      {done ? <p data-testid="dataset-upload-done">{done}</p> : null}
    </Card>
  );
}

export function DatasetsPage() {
  const { canWrite } = useSession();
  return (
    <div>
      <h2>Datasets</h2>
      <div className="grid">
        <DatasetsTable />
        {canWrite ? <DatasetUploadCard /> : null}
        <DatasetPreviewCard />
      </div>
    </div>
  );
}
