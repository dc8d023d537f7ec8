//! Exports `aegis-sink-file` as a loadable plugin library.
aegis_station_api::export_root!(aegis_sink_file::plugin_module);
