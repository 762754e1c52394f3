"""Resource plans (paper Algorithm 1 + simulator) and the device catalog they price."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from fastapi.concurrency import run_in_threadpool

from backend.api.deps import AdminAuth, SettingsDep, ViewerAuth
from backend.planner import catalog_store
from backend.planner.devices import DEFAULT_DEVICES, DeviceSpec
from backend.planner.schemas import DevicePublic, DevicesPublic, DeviceUpdate, PlanPublic, PlanRequest
from backend.planner.service import make_plan
from backend.services.errors import InvalidInput, NotFound

router = APIRouter(prefix="/plans", tags=["plans"])


@router.post("")
async def create_plan(body: PlanRequest, auth: ViewerAuth, settings: SettingsDep) -> PlanPublic:
    """Split devices between generation and training and predict iteration time, throughput and the timeline."""
    catalog = catalog_store.load_catalog(settings.data_dir)
    try:
        return await run_in_threadpool(make_plan, body, catalog)  # CPU-bound: keep the event loop free
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc


def _public(spec: DeviceSpec, overridden: set[str]) -> DevicePublic:
    return DevicePublic(**spec.to_dict(), overridden=spec.name in overridden)


@router.get("/devices")
def list_devices(auth: ViewerAuth, settings: SettingsDep) -> DevicesPublic:
    """The device catalog: defaults updated by admin overrides."""
    overridden = set(catalog_store.load_overrides(settings.data_dir))
    devices = [_public(d, overridden) for d in catalog_store.load_catalog(settings.data_dir).values()]
    return DevicesPublic(data=devices, count=len(devices))


@router.put("/devices/{name}")
def put_device(name: str, body: DeviceUpdate, auth: AdminAuth, settings: SettingsDep) -> DevicePublic:
    """Override a device's figures or add a device (admin)."""
    if not name.strip() or len(name) > 64:
        raise InvalidInput("device name must be 1-64 characters", loc=("path", "name"))
    spec = catalog_store.save_override(settings.data_dir, DeviceSpec(name=name.strip(), **body.model_dump()))
    return _public(spec, {spec.name})


@router.delete("/devices/{name}", status_code=status.HTTP_204_NO_CONTENT)
def delete_device(name: str, auth: AdminAuth, settings: SettingsDep) -> Response:
    """Drop an override: a default device reverts to its defaults, an added device disappears (admin)."""
    if not catalog_store.delete_override(settings.data_dir, name):
        hint = " (it has its default figures)" if name in DEFAULT_DEVICES else ""
        raise NotFound(f"device {name} has no override{hint}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
