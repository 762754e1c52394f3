/** The submit form's dataset upload (JSONL, Parquet or CSV) with its progress; a 422 names the bad line. */
import type { Dataset } from "../api/types";
import { FileUpload } from "../components/FileUpload";

export const DATASET_EXTENSIONS = /\.(jsonl?|parquet|csv)$/;
export const DATASET_ACCEPT = ".jsonl,.json,.parquet,.csv,application/jsonl";

export function DatasetUpload({ onUploaded }: { onUploaded: (dataset: Dataset) => void }) {
  return (
    <FileUpload<Dataset>
      url="/api/v1/datasets"
      accept={DATASET_ACCEPT}
      extensions={DATASET_EXTENSIONS}
      fileInput="dataset_file"
      nameInput="dataset_name"
      namePlaceholder="dataset name (default: file name)"
      button="Upload"
      testId="form-dataset-upload"
      label={'…or upload JSONL, Parquet or CSV ({"prompt": …} or {"messages": […]} rows)'}
      describe={(d) => `uploaded ${d.name}: ${d.row_count} rows`}
      onUploaded={onUploaded}
    />
  );
}
