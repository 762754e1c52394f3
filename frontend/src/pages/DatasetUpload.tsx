/** Upload a JSONL dataset (multipart); a 422 names the bad line, shown under the file input. */
import { useState } from "react";
import { api, ApiError, unwrap } from "../api/client";
import type { Dataset } from "../api/types";
import { Field } from "../components/ui";

export function DatasetUpload({ onUploaded }: { onUploaded: (dataset: Dataset) => void }) {
  const [file, setFile] = useState<File | null>(null);
  const [name, setName] = useState("");
  const [error, setError] = useState<string | undefined>();
  const [done, setDone] = useState<string | undefined>();
  const [busy, setBusy] = useState(false);

  const upload = async () => {
    if (!file) return;
    setBusy(true);
    setError(undefined);
    setDone(undefined);
    try {
      const dataset = await unwrap(
        api.POST("/api/v1/datasets", {
          body: { file: file as unknown as string, name: name || file.name.replace(/\.(jsonl?|parquet|csv)$/, "") },
          bodySerializer: (body) => {
            const data = new FormData();
            data.append("file", body.file as unknown as Blob);
            data.append("name", body.name);
            return data;
          },
        }),
      );
      setDone(`uploaded ${dataset.name}: ${dataset.row_count} rows`);
      onUploaded(dataset);
    } catch (caught) {
      // a 422 names the line in its loc and again in its message: show the messages only ("line 2: invalid JSON")
      const lines = caught instanceof ApiError ? Object.values(caught.fields) : [];
      setError(lines.length ? lines.join("; ") : caught instanceof Error ? caught.message : String(caught));
    } finally {
      setBusy(false);
    }
  };

  return (
    <div className="upload">
      <Field label="…or upload JSONL, Parquet or CSV ({&quot;prompt&quot;: …} or {&quot;messages&quot;: […]} rows)" error={error} hint={done}>
        <input name="dataset_file" type="file" accept=".jsonl,.json,.parquet,.csv,application/jsonl" onChange={(e) => setFile(e.target.files?.[0] ?? null)} />
      </Field>
      <div className="row">
        <input name="dataset_name" placeholder="dataset name (default: file name)" value={name} onChange={(e) => setName(e.target.value)} />
        <button type="button" onClick={upload} disabled={!file || busy}>
          {busy ? "Uploading…" : "Upload"}
        </button>
      </div>
    </div>
  );
}
