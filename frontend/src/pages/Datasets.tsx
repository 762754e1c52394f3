/**
 * Datasets page (`#/datasets`, in the navigation): the team's datasets with their stats (rows, size, source, state),
 * uploading a JSONL / Parquet / CSV file with its progress (a name already taken in the team is refused, 409), and
 * the preview of a dataset through a model's chat template with its prompt-length histogram (DatasetPreviewCard).
 */
import { api, unwrap } from "../api/client";
import type { Dataset } from "../api/types";
import { Card, ErrorBanner, formatTime } from "../components/ui";
import { queryClient, useApiQuery } from "../lib/queries";
import { useSession } from "../session";
import { DatasetPreviewCard } from "./DatasetPreviewCard";
import { DATASET_ACCEPT, DATASET_EXTENSIONS } from "./DatasetUpload";
import { FileUpload } from "../components/FileUpload";

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
  return (
    <Card title="Upload a dataset">
      <p className="muted">
        JSONL, Parquet or CSV rows with a <code>prompt</code> (text or chat messages) or OpenAI <code>messages</code>;
        other columns reach the reward. A bad row is named and nothing is stored.
      </p>
      <FileUpload<Dataset>
        url="/api/v1/datasets"
        accept={DATASET_ACCEPT}
        extensions={DATASET_EXTENSIONS}
        fileInput="dataset_upload_file"
        nameInput="dataset_upload_name"
        namePlaceholder="dataset name (default: file name)"
        button="Upload dataset"
        testId="dataset-upload"
        describe={(d) => `uploaded ${d.name}: ${d.row_count} rows`}
        onUploaded={() => queryClient.invalidateQueries({ queryKey: ["datasets"] })}
      />
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
