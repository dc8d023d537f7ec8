//! Exports `aegis-sink-memory` as a loadable plugin library.
aegis_station_api::export_root!(aegis_sink_memory::plugin_module);
